"""The GPU and MIG database: contents, lookups, MIG slices, and agreement with the datasets."""
from __future__ import annotations

import csv
import dataclasses
import json
import re
from importlib import resources
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from lilou.errors import LilouInputError
from lilou.hardware import (
    all_devices,
    all_gpus,
    find_gpu,
    gpu_for_dataset_device,
    resolve_device,
)
from lilou.hardware.database import MEMORY_TYPES, PARSED_COPY, PEAK_KEYS, _index_by_key, _parse_gpu, _parsed

# ---------------------------------------------------------------------------- contents

REQUIRED = [
    "t4", "p4", "p100-pcie-16gb", "v100-pcie-32gb", "v100-sxm2-32gb", "a10", "a10g", "a30", "a40",
    "a100-pcie-40gb", "a100-sxm4-40gb", "a100-pcie-80gb", "a100-sxm4-80gb", "l4", "l40s",
    "h100-pcie", "h100-sxm", "h100-nvl", "h200", "rtx-2080-ti", "rtx-3090", "rtx-4090",
    "gtx-1080-ti", "titan-x-pascal", "titan-xp", "titan-rtx",
    # added with the Maxwell / Blackwell extension
    "m40-24gb", "gtx-titan-x", "p100-sxm2-16gb", "v100-sxm2-16gb", "v100s-pcie-32gb", "b200", "b300",
    "gb200", "gb300", "rtx-pro-6000-blackwell-server", "l40", "rtx-3090-ti", "rtx-5090", "rtx-a6000",
    "a2", "rtx-3080", "rtx-4080", "rtx-6000-ada", "gh200",
]


def test_database_holds_every_required_gpu():
    names = [gpu.name for gpu in all_gpus()]
    assert len(names) >= 44
    assert len(set(names)) == len(names)
    assert sorted(set(REQUIRED) - set(names)) == []


def test_all_gpus_is_loaded_once_and_returns_a_fresh_list():
    first, second = all_gpus(), all_gpus()
    assert first == second and first is not second
    assert all(a is b for a, b in zip(first, second))


ARCHITECTURES = {"Maxwell", "Pascal", "Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell"}
# Compute capabilities each architecture may carry (GA100 8.0 / GA10x 8.6; sm_100, sm_103, sm_120).
CAPABILITIES = {
    "Maxwell": {"5.2"}, "Pascal": {"6.0", "6.1"}, "Volta": {"7.0"}, "Turing": {"7.5"}, "Ampere": {"8.0", "8.6"},
    "Ada Lovelace": {"8.9"}, "Hopper": {"9.0"}, "Blackwell": {"10.0", "10.3", "12.0"},
}


@pytest.mark.parametrize("gpu", all_gpus(), ids=lambda gpu: gpu.name)
def test_every_entry_is_complete_and_cites_a_source(gpu):
    assert gpu.architecture in ARCHITECTURES
    assert re.fullmatch(r"\d+\.\d", gpu.compute_capability)
    assert gpu.compute_capability in CAPABILITIES[gpu.architecture]
    numbers = [gpu.sms, gpu.boost_clock_mhz, gpu.memory_gb, gpu.memory_bandwidth_gbs, gpu.l2_mb,
               gpu.fp32_tflops, gpu.tdp_w]
    assert all(isinstance(n, (int, float)) and n > 0 for n in numbers)
    assert gpu.source and all(url.startswith("https://") for url in gpu.source)
    # Only Maxwell and Pascal lack tensor cores; everything newer has a dense FP16 tensor figure.
    assert (gpu.tensor_tflops is None) == (gpu.architecture in {"Maxwell", "Pascal"})
    # Only Maxwell (GM200) lacks native FP16 arithmetic.
    assert (gpu.fp16_tflops is None) == (gpu.architecture == "Maxwell")
    assert gpu.fp16_tflops is None or gpu.fp16_tflops > 0


# FP32 lanes per SM by compute capability: 64 on GP100, Volta, Turing and GA100; 128 elsewhere.
FP32_LANES_PER_SM = {"5.2": 128, "6.0": 64, "6.1": 128, "7.0": 64, "7.5": 64, "8.0": 64, "8.6": 128, "8.9": 128,
                     "9.0": 128, "10.0": 128, "10.3": 128, "12.0": 128}
# Where INT32 shares the FP32 lanes: GA10x, AD10x and GB20x.
INT32_SHARES_FP32 = {"8.6", "8.9", "12.0"}
TENSOR_CORE_GENERATION = {"Maxwell": None, "Pascal": None, "Volta": 1, "Turing": 2, "Ampere": 3,
                          "Ada Lovelace": 4, "Hopper": 4, "Blackwell": 5}


@pytest.mark.parametrize("gpu", all_gpus(), ids=lambda gpu: gpu.name)
def test_fp32_peak_agrees_with_sms_and_clock(gpu):
    """Catches typos: peak FP32 = SMs x FP32 lanes x 2 (FMA) x boost clock, within rounding (2 %)."""
    assert gpu.fp32_lanes_per_sm == FP32_LANES_PER_SM[gpu.compute_capability]
    derived = gpu.sms * gpu.fp32_lanes_per_sm * 2 * gpu.boost_clock_mhz / 1e6
    assert gpu.fp32_tflops == pytest.approx(derived, rel=0.02)


@pytest.mark.parametrize("gpu", all_gpus(), ids=lambda gpu: gpu.name)
def test_every_entry_has_the_datapath_fields(gpu):
    assert type(gpu.fp32_lanes_per_sm) is int
    assert type(gpu.int32_shares_fp32_datapath) is bool
    assert gpu.int32_shares_fp32_datapath == (gpu.compute_capability in INT32_SHARES_FP32)
    assert gpu.tensor_core_generation == TENSOR_CORE_GENERATION[gpu.architecture]
    assert gpu.tensor_core_generation is None or type(gpu.tensor_core_generation) is int
    assert gpu.memory_type in MEMORY_TYPES


@pytest.mark.parametrize("gpu", all_gpus(), ids=lambda gpu: gpu.name)
def test_every_entry_has_every_peak(gpu):
    peaks = gpu.peak_tflops
    assert list(peaks) == list(PEAK_KEYS)
    assert all(value is None or (type(value) is float and value > 0) for value in peaks.values())
    assert peaks["fp64"] is not None and peaks["fp32"] is not None


@pytest.mark.parametrize("gpu", all_gpus(), ids=lambda gpu: gpu.name)
def test_peaks_repeat_the_legacy_figures(gpu):
    """The trained model reads fp32_tflops / fp16_tflops / tensor_tflops; the peaks must not drift from them."""
    assert gpu.peak_tflops["fp32"] == gpu.fp32_tflops
    assert gpu.peak_tflops["fp16"] == gpu.fp16_tflops
    assert gpu.peak_tflops["fp16_tensor"] == gpu.tensor_tflops


def _capability(gpu) -> tuple[int, int]:
    major, minor = gpu.compute_capability.split(".")
    return int(major), int(minor)


@pytest.mark.parametrize("gpu", all_gpus(), ids=lambda gpu: gpu.name)
def test_peaks_exist_only_where_the_hardware_has_the_unit(gpu):
    peaks, cc = gpu.peak_tflops, _capability(gpu)
    tensor = gpu.tensor_core_generation is not None
    assert (peaks["bf16"] is not None) == (cc >= (8, 0))  # BF16 arithmetic from Ampere on
    assert (peaks["int8"] is not None) == (cc >= (6, 1))  # DP4A from sm_61 on (not Maxwell, not GP100)
    assert (peaks["tf32_tensor"] is not None) == (cc >= (8, 0))
    assert (peaks["bf16_tensor"] is not None) == (cc >= (8, 0))
    assert (peaks["fp8_tensor"] is not None) == (cc >= (8, 9))  # Ada, Hopper, Blackwell
    assert (peaks["int8_tensor"] is not None) == (tensor and cc >= (7, 5))  # Turing on
    assert (peaks["int4_tensor"] is not None) == (tensor and (7, 5) <= cc < (9, 0))  # Turing to Ada
    assert (peaks["fp4_tensor"] is not None) == (gpu.architecture == "Blackwell")
    if peaks["tf32_tensor"] is not None:  # TF32 runs at half the FP16 rate (NVIDIA rounds B200's 1.125 to 1.1)
        assert peaks["tf32_tensor"] == pytest.approx(peaks["fp16_tensor"] / 2, rel=0.025)
    if peaks["bf16_tensor"] is not None:
        assert peaks["bf16_tensor"] == peaks["fp16_tensor"]
    if peaks["fp8_tensor"] is not None:
        assert peaks["fp8_tensor"] == pytest.approx(2 * peaks["fp16_tensor"], rel=0.02)


# Datasheet / whitepaper figures, dense (no sparsity), TFLOPS or TOPS.
SPOT_CHECKS = {
    "a100-sxm4-80gb": {"fp64": 9.7, "fp32": 19.5, "fp16": 78, "bf16": 39, "tf32_tensor": 156, "bf16_tensor": 312,
                       "fp16_tensor": 312, "int8_tensor": 624, "int4_tensor": 1248, "fp8_tensor": None},
    "h100-sxm": {"fp64": 33.5, "fp32": 66.9, "tf32_tensor": 494.7, "bf16_tensor": 989.4, "fp8_tensor": 1978.9,
                 "int8_tensor": 1978.9, "int4_tensor": None, "fp4_tensor": None},
    "h100-pcie": {"fp64": 25.6, "tf32_tensor": 378, "bf16_tensor": 756.5, "fp8_tensor": 1513},
    "h200": {"bf16_tensor": 989.4, "fp8_tensor": 1978.9},
    "l4": {"fp32": 30.3, "tf32_tensor": 60, "bf16_tensor": 121, "fp8_tensor": 242.5, "int8_tensor": 242.5},
    "l40s": {"tf32_tensor": 183, "bf16_tensor": 362, "fp8_tensor": 733, "int8_tensor": 733},
    "l40": {"bf16_tensor": 181.05, "fp8_tensor": 362, "int4_tensor": 724},
    "a10": {"tf32_tensor": 62.5, "bf16_tensor": 125, "int8_tensor": 250, "int4_tensor": 500},
    "a40": {"tf32_tensor": 74.8, "bf16_tensor": 149.7, "int8_tensor": 299.3},
    "a30": {"fp64": 5.2, "tf32_tensor": 82, "bf16_tensor": 165, "int8_tensor": 330, "int4_tensor": 661},
    "a2": {"fp32": 4.5, "tf32_tensor": 9, "bf16_tensor": 18, "int8_tensor": 36, "int4_tensor": 72},
    "rtx-3090": {"tf32_tensor": 35.6, "bf16_tensor": 71, "int8_tensor": 284, "int4_tensor": 568},
    "rtx-4090": {"fp8_tensor": 330.3, "int8_tensor": 660.6, "int4_tensor": 1321.2},  # FP8 with FP32 accumulate
    "rtx-5090": {"fp32": 104.8, "bf16_tensor": 209.5, "fp8_tensor": 419, "fp4_tensor": 1676, "int4_tensor": None},
    "t4": {"fp16_tensor": 65, "int8_tensor": 130, "int4_tensor": 260, "bf16_tensor": None},
    "v100-sxm2-16gb": {"fp64": 7.8, "fp32": 15.7, "fp16_tensor": 125, "int8_tensor": None},
    "v100s-pcie-32gb": {"fp64": 8.2, "fp32": 16.4, "fp16_tensor": 130},
    "p100-sxm2-16gb": {"fp64": 5.3, "fp32": 10.6, "fp16": 21.2, "int8": None},
    "p4": {"int8": 22.8},
    "m40-24gb": {"fp32": 6.83, "fp16": None, "int8": None, "fp16_tensor": None},
    "b200": {"fp64": 37, "fp32": 75, "tf32_tensor": 1100, "bf16_tensor": 2250, "fp8_tensor": 4500,
             "int8_tensor": 4500, "fp4_tensor": 9000},
    "gb200": {"fp64": 40, "fp32": 80, "bf16_tensor": 2500, "fp8_tensor": 5000, "fp4_tensor": 10000},
    "b300": {"fp64": 1.25, "bf16_tensor": 2250, "fp8_tensor": 4500, "int8_tensor": 153.5, "fp4_tensor": 14000},
    "gb300": {"bf16_tensor": 2500, "fp8_tensor": 5000, "int8_tensor": 165, "fp4_tensor": 15000},
    "rtx-pro-6000-blackwell-server": {"fp32": 117.0, "bf16_tensor": 467.8, "fp8_tensor": 935.6, "fp4_tensor": 1871.2},
}


@pytest.mark.parametrize("name", sorted(SPOT_CHECKS))
def test_peaks_match_the_datasheets(name):
    peaks = find_gpu(name).peak_tflops
    assert {key: peaks[key] for key in SPOT_CHECKS[name]} == SPOT_CHECKS[name]


@pytest.mark.parametrize(("name", "fields"), [
    ("m40-24gb", {"architecture": "Maxwell", "compute_capability": "5.2", "sms": 24, "memory_gb": 24,
                  "memory_type": "GDDR5", "fp32_lanes_per_sm": 128, "tensor_core_generation": None}),
    ("gtx-titan-x", {"architecture": "Maxwell", "compute_capability": "5.2", "memory_gb": 12}),
    ("p100-pcie-16gb", {"fp32_lanes_per_sm": 64, "memory_type": "HBM2"}),
    ("a100-sxm4-80gb", {"fp32_lanes_per_sm": 64, "int32_shares_fp32_datapath": False, "memory_type": "HBM2e"}),
    ("rtx-3090", {"fp32_lanes_per_sm": 128, "int32_shares_fp32_datapath": True, "memory_type": "GDDR6X"}),
    ("l40s", {"int32_shares_fp32_datapath": True, "tensor_core_generation": 4}),
    ("h100-sxm", {"fp32_lanes_per_sm": 128, "int32_shares_fp32_datapath": False, "tensor_core_generation": 4,
                  "memory_type": "HBM3"}),
    ("h200", {"memory_type": "HBM3e"}),
    ("b200", {"architecture": "Blackwell", "compute_capability": "10.0", "sms": 148, "tensor_core_generation": 5,
              "int32_shares_fp32_datapath": False, "memory_type": "HBM3e", "memory_gb": 180}),
    ("gb200", {"compute_capability": "10.0", "sms": 152, "tdp_w": 1200}),
    ("b300", {"compute_capability": "10.3", "sms": 148, "tdp_w": 1100}),
    ("gb300", {"compute_capability": "10.3", "tdp_w": 1400}),
    ("rtx-pro-6000-blackwell-server", {"architecture": "Blackwell", "compute_capability": "12.0", "sms": 188,
                                       "int32_shares_fp32_datapath": True, "memory_type": "GDDR7", "memory_gb": 96}),
    ("rtx-5090", {"compute_capability": "12.0", "sms": 170, "memory_type": "GDDR7", "l2_mb": 96}),
])
def test_new_fields_of_selected_gpus(name, fields):
    gpu = find_gpu(name)
    assert {key: getattr(gpu, key) for key in fields} == fields


def test_index_refuses_a_spelling_shared_by_two_gpus():
    t4, p4 = find_gpu("t4"), find_gpu("p4")
    clash = dataclasses.replace(p4, aliases=("Tesla-T4",))
    with pytest.raises(ValueError, match="'Tesla-T4' of p4 is also a name of t4"):
        _index_by_key((t4, clash))


# ---------------------------------------------------------------------------- lookups


@pytest.mark.parametrize(("spelling", "canonical"), [
    ("A10G", "a10g"),
    ("a10g", "a10g"),
    ("nvidia-a10g", "a10g"),
    ("NVIDIA A10G", "a10g"),
    ("Tesla T4", "t4"),
    ("t4", "t4"),
    ("a100-80gb", "a100-sxm4-80gb"),
    ("A100 80GB PCIe", "a100-pcie-80gb"),
    ("a100_pcie_40gb", "a100-pcie-40gb"),
    ("h100-sxm", "h100-sxm"),
    ("H100", "h100-sxm"),
    ("NVIDIA GeForce RTX 3090", "rtx-3090"),
    ("rtx3090", "rtx-3090"),
    ("Titan Xp", "titan-xp"),
    ("V100-PCIE-16GB", "v100-pcie-16gb"),
    ("v100-pcie-32gb", "v100-pcie-32gb"),
])
def test_find_gpu_ignores_case_punctuation_and_brand_words(spelling, canonical):
    assert find_gpu(spelling).name == canonical


# Every device string of the measurement data (AIConfigurator, Liger-Kernel, WattGPU, DeepBench's
# file tags and Specs models, Argonne's GH200) and the database entry it must resolve to.
DATASET_SPELLINGS = {
    "NVIDIA A100-SXM4-80GB": "a100-sxm4-80gb",
    "NVIDIA L40S": "l40s",
    "NVIDIA H200": "h200",
    "NVIDIA B200": "b200",
    "NVIDIA B300 SXM6 AC": "b300",
    "NVIDIA GB200": "gb200",
    "NVIDIA GB300": "gb300",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx-pro-6000-blackwell-server",
    "NVIDIA GeForce RTX 3090": "rtx-3090",
    "NVIDIA GeForce RTX 4090": "rtx-4090",
    "1080Ti": "gtx-1080-ti",
    "Nvidia 1080Ti": "gtx-1080-ti",
    "NVIDIA GTX 1080 Ti": "gtx-1080-ti",
    "M40": "m40-24gb",
    "Nvidia Tesla M40": "m40-24gb",
    "Tesla M40": "m40-24gb",
    "P100": "p100-pcie-16gb",
    "NVIDIA Tesla P100": "p100-pcie-16gb",
    "T4": "t4",
    "NVIDIA T4": "t4",
    "TitanX": "gtx-titan-x",
    "Nvidia TitanX": "gtx-titan-x",
    "TitanX_Pascal": "titan-x-pascal",
    "Nvidia TitanX Pascal": "titan-x-pascal",
    "TitanXp": "titan-xp",
    "Nvidia TitanXp": "titan-xp",
    "NVIDIA GTX TitanXp": "titan-xp",
    "V100": "v100-sxm2-32gb",
    "NVIDIA V100": "v100-sxm2-32gb",
    "NVIDIA GH200 480GB": "gh200",
    "Nvidia GH200 GPU": "gh200",
}


@pytest.mark.parametrize(("spelling", "canonical"), sorted(DATASET_SPELLINGS.items()))
def test_every_dataset_device_string_resolves(spelling, canonical):
    assert find_gpu(spelling).name == canonical
    assert gpu_for_dataset_device(spelling).name == canonical


@pytest.mark.parametrize(("spelling", "canonical"), [
    ("b300-sxm", "b300"),
    ("rtx-pro-6000-server", "rtx-pro-6000-blackwell-server"),
    ("m40", "m40-24gb"),
    ("p100-sxm2", "p100-sxm2-16gb"),
    ("Tesla P100-SXM2-16GB", "p100-sxm2-16gb"),
    ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
    ("Tesla V100S-PCIE-32GB", "v100s-pcie-32gb"),
    ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
    ("NVIDIA RTX A6000", "rtx-a6000"),
    ("NVIDIA GeForce RTX 5090", "rtx-5090"),
    ("NVIDIA GeForce RTX 3090 Ti", "rtx-3090-ti"),
    ("NVIDIA L40", "l40"),
    ("NVIDIA A2", "a2"),
])
def test_new_gpus_resolve_by_their_usual_spellings(spelling, canonical):
    assert find_gpu(spelling).name == canonical


def test_titan_x_means_the_maxwell_card_and_the_pascal_card_keeps_its_names():
    maxwell = find_gpu("titan-x")
    assert maxwell.name == "gtx-titan-x" and maxwell.architecture == "Maxwell"
    assert find_gpu("GTX Titan X").name == find_gpu("TitanX").name == "gtx-titan-x"
    pascal = find_gpu("titan-x-pascal")
    assert pascal.architecture == "Pascal" and "titan-x" not in pascal.aliases
    assert find_gpu("Titan X (Pascal)").name == "titan-x-pascal"
    assert find_gpu("Titan Xp").name == "titan-xp"


def test_unknown_gpu_suggests_the_closest_names_on_one_line():
    with pytest.raises(LilouInputError) as error:
        find_gpu("a10x")
    assert str(error.value) == "unknown GPU 'a10x'; did you mean: a10, a100, a10g?"


def test_unknown_gpu_without_close_names_points_to_the_list():
    with pytest.raises(LilouInputError) as error:
        find_gpu("quadro")
    assert str(error.value) == "unknown GPU 'quadro'; `lilou gpus` lists the known GPUs"


@pytest.mark.parametrize(("gpu", "mig", "line"), [
    ("-" * 900_000, None, "GPU name '" + "-" * 40 + "'... has 900,000 characters"),
    ("x" * 201, None, "GPU name '" + "x" * 40 + "'... has 201 characters"),
    ("a100/" + "1" * 90_000, None, "GPU name 'a100/" + "1" * 35 + "'... has 90,005 characters"),
    ("a100", "1" * 300, "MIG profile '" + "1" * 40 + "'... has 300 characters"),
])
def test_a_name_too_long_for_a_gpu_is_refused_before_any_work(gpu, mig, line):
    """A name of 40 kB took 11 s to refuse (the regular expression for a name that holds a MIG slice backtracks
    quadratically, and so do the suggestions' comparisons), 900 kB would have taken hours: the service froze for as
    long (audit ua46). Names past 200 characters are refused at once; 200 is far above any real one (44)."""
    with pytest.raises(LilouInputError) as error:
        resolve_device(gpu, mig)
    assert str(error.value) == (f"{line}; a GPU or MIG profile name has at most 200 (`lilou gpus` lists the known "
                                "GPUs)")
    with pytest.raises(LilouInputError, match="unknown GPU"):  # 200 characters are still looked up and suggested for
        resolve_device("-" * 200)


@pytest.mark.parametrize("name", ["", "nvidia", "Tesla"])
def test_a_brand_word_alone_is_not_a_gpu(name):
    with pytest.raises(LilouInputError, match="unknown GPU"):
        find_gpu(name)


# ---------------------------------------------------------------------------- MIG profiles

A100_40GB = [("1g.5gb", 14), ("1g.5gb+me", 14), ("1g.10gb", 14), ("2g.10gb", 28),
             ("3g.20gb", 42), ("4g.20gb", 56), ("7g.40gb", 98)]
A100_80GB = [("1g.10gb", 14), ("1g.10gb+me", 14), ("1g.20gb", 14), ("2g.20gb", 28),
             ("3g.40gb", 42), ("4g.40gb", 56), ("7g.80gb", 98)]
A30 = [("1g.6gb", 14), ("1g.6gb+me", 14), ("2g.12gb", 28), ("2g.12gb+me", 28), ("4g.24gb", 56)]
H100_PCIE = [("1g.10gb", 14), ("1g.10gb+me", 14), ("1g.20gb", 14), ("2g.20gb", 30),
             ("3g.40gb", 46), ("4g.40gb", 62), ("7g.80gb", 114)]
H100_SXM = [("1g.10gb", 16), ("1g.10gb+me", 16), ("1g.20gb", 26), ("2g.20gb", 32),
            ("3g.40gb", 60), ("4g.40gb", 64), ("7g.80gb", 132)]
H100_NVL = [("1g.12gb", 16), ("1g.12gb+me", 16), ("1g.24gb", 26), ("2g.24gb", 32),
            ("3g.47gb", 60), ("4g.47gb", 64), ("7g.94gb", 132)]
H200 = [("1g.18gb", 16), ("1g.18gb+me", 16), ("1g.35gb", 26), ("2g.35gb", 32),
        ("3g.71gb", 60), ("4g.71gb", 64), ("7g.141gb", 132)]

EXPECTED_MIG = {
    "a100-pcie-40gb": A100_40GB, "a100-sxm4-40gb": A100_40GB,
    "a100-pcie-80gb": A100_80GB, "a100-sxm4-80gb": A100_80GB,
    "a30": A30,
    "h100-pcie": H100_PCIE, "h100-sxm": H100_SXM, "h100-nvl": H100_NVL,
    "h200": H200, "h200-nvl": H200,
}


@pytest.mark.parametrize("gpu", all_gpus(), ids=lambda gpu: gpu.name)
def test_mig_profiles_and_their_sm_counts(gpu):
    actual = [(profile.name, profile.sms) for profile in gpu.mig_profiles]
    assert actual == EXPECTED_MIG.get(gpu.name, [])
    assert (gpu.mig_source is not None) == gpu.supports_mig
    if gpu.supports_mig:
        assert gpu.mig_source.startswith("https://docs.nvidia.com/datacenter/tesla/mig-user-guide/")


@pytest.mark.parametrize("name", sorted(EXPECTED_MIG))
def test_mig_profile_fields_agree_with_names_and_slices(name):
    gpu = find_gpu(name)
    total_slices = max(profile.memory_slices for profile in gpu.mig_profiles)
    largest_compute_slices = max(profile.compute_slices for profile in gpu.mig_profiles)
    for profile in gpu.mig_profiles:
        match = re.fullmatch(r"(\d)g\.(\d+)gb(\+me)?", profile.name)
        assert match, profile.name
        assert profile.compute_slices == int(match[1])
        assert profile.memory_gb == int(match[2])
        assert profile.l2_fraction == profile.bandwidth_fraction == profile.memory_slices / total_slices
        assert profile.sms <= gpu.sms
        assert profile.max_instances * profile.memory_slices <= total_slices
        assert profile.max_instances * profile.compute_slices <= largest_compute_slices
    largest = gpu.mig_profiles[-1]
    assert (largest.l2_fraction, largest.memory_gb) == (1.0, gpu.memory_gb)


@pytest.mark.parametrize("name", sorted(EXPECTED_MIG))
def test_larger_profiles_never_get_fewer_sms_or_less_bandwidth(name):
    profiles = find_gpu(name).mig_profiles
    for small in profiles:
        for large in profiles:
            if large.compute_slices >= small.compute_slices and large.memory_slices >= small.memory_slices:
                assert large.sms >= small.sms, (small.name, large.name)
                assert large.bandwidth_fraction >= small.bandwidth_fraction, (small.name, large.name)


def test_mig_profile_lookup_accepts_nvidia_smi_spelling():
    gpu = find_gpu("a100-80gb")
    assert gpu.mig_profile("MIG 1g.10gb").name == "1g.10gb"
    assert gpu.mig_profile("3G.40GB").name == "3g.40gb"


def test_a_slice_is_found_by_the_names_cuda_and_kubernetes_give_it():
    """What a user copies from inside a slice (``torch.cuda.get_device_name()``, ``nvidia-smi -L``), from GPU feature
    discovery's product label and from a pod's resource request: each was refused ("unknown GPU", "has no MIG
    profile")."""
    from lilou.hardware import resolve_device

    assert resolve_device("NVIDIA A100-SXM4-80GB MIG 1g.10gb").name == "a100-sxm4-80gb/1g.10gb"
    assert resolve_device("NVIDIA H100 PCIe MIG 3g.40gb").name == "h100-pcie/3g.40gb"
    assert resolve_device("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb").name == "h100-sxm/1g.10gb"
    assert resolve_device("NVIDIA-A100-80GB-PCIe-MIG-1g.10gb").name == "a100-pcie-80gb/1g.10gb"
    assert resolve_device("h100-sxm", "nvidia.com/mig-2g.20gb").name == "h100-sxm/2g.20gb"
    assert resolve_device("h100-sxm", "nvidia.com/mig-1g.10gb.me").name == "h100-sxm/1g.10gb+me"
    assert resolve_device("h100-sxm/1g.10gb.me").name == "h100-sxm/1g.10gb+me"
    with pytest.raises(LilouInputError, match="names MIG profile '1g.10gb' and --mig names '2g.20gb'; give one"):
        resolve_device("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "2g.20gb")


def test_invalid_mig_profile_lists_the_valid_ones():
    with pytest.raises(LilouInputError) as error:
        find_gpu("a100-40gb").mig_profile("1g.10gb+me")
    assert str(error.value) == (
        "GPU 'a100-sxm4-40gb' has no MIG profile '1g.10gb+me'; valid profiles: "
        "1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"
    )


def test_a_family_name_with_a_profile_of_another_board_says_which_has_it():
    """`--gpu a100 --mig 3g.40gb` named only the A100-40GB's profiles, as if no A100 had a 3g.40gb slice."""
    with pytest.raises(LilouInputError) as error:
        resolve_device("h100", "1g.12gb")
    assert str(error.value) == (
        "GPU 'h100-sxm' has no MIG profile '1g.12gb'; valid profiles: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, "
        "4g.40gb, 7g.80gb; 'h100' means h100-sxm here, and h100-nvl has 1g.12gb: pass the full name")
    with pytest.raises(LilouInputError, match="a100-pcie-80gb, a100-sxm4-80gb have 3g.40gb: pass the full name"):
        resolve_device("a100", "3g.40gb")


def test_mig_on_a_gpu_without_mig_says_so():
    with pytest.raises(LilouInputError) as error:
        resolve_device("t4", "1g.5gb")
    assert str(error.value) == "GPU 't4' has no MIG support, so it has no profile '1g.5gb'"


def test_a_gpu_that_runs_mig_without_profiles_here_says_so():
    """A B200 runs MIG (NVIDIA's MIG user guide lists 1g.23gb ... 7g.180gb); its slices' SM counts are not in the
    database. It was refused as having "no MIG support", which told a planner that B200 fleets cannot be sliced."""
    for gpu in ("b200", "gb200", "b300", "gb300", "gh200", "rtx-pro-6000-blackwell-server"):
        with pytest.raises(LilouInputError) as error:
            resolve_device(gpu, "1g.23gb")
        assert str(error.value) == (
            f"GPU '{gpu}' supports MIG, but its profiles are not in Lilou's database yet (their SM counts are not "
            "published), so '1g.23gb' cannot be priced; the whole GPU can")
    assert resolve_device("b200").mig is None and not find_gpu("b200").supports_mig


# ---------------------------------------------------------------------------- devices


def test_whole_gpu_device_has_full_fractions():
    device = resolve_device("NVIDIA A10G")
    assert (device.name, device.gpu, device.mig) == ("a10g", "a10g", None)
    assert (device.sms, device.memory_bandwidth_gbs, device.l2_mb) == (80, 600, 6)
    assert (device.sm_fraction, device.l2_fraction, device.bandwidth_fraction) == (1.0, 1.0, 1.0)
    assert (device.architecture, device.compute_capability) == ("Ampere", "8.6")


def test_a100_40gb_3g_slice_gets_42_sms_and_half_the_bandwidth():
    device = resolve_device("a100-40gb", "3g.20gb")
    assert (device.name, device.gpu, device.mig) == ("a100-sxm4-40gb/3g.20gb", "a100-sxm4-40gb", "3g.20gb")
    assert device.sms == 42
    assert device.sm_fraction == pytest.approx(42 / 108)
    assert (device.bandwidth_fraction, device.l2_fraction) == (0.5, 0.5)
    assert device.memory_bandwidth_gbs == pytest.approx(1555 / 2)
    assert device.l2_mb == pytest.approx(20)
    assert device.memory_gb == 20
    assert device.fp32_tflops == pytest.approx(19.5 * 42 / 108)
    assert device.tensor_tflops == pytest.approx(312 * 42 / 108)
    assert device.boost_clock_mhz == 1410


def test_a100_80gb_smallest_slice():
    device = resolve_device("a100-80gb", "1g.10gb")
    assert (device.gpu, device.sms, device.memory_gb) == ("a100-sxm4-80gb", 14, 10)
    assert device.memory_bandwidth_gbs == pytest.approx(2039 / 8)
    assert device.l2_mb == pytest.approx(5)


def test_a100_7g_slice_loses_the_sms_mig_cannot_use():
    device = resolve_device("a100-pcie-40gb", "7g.40gb")
    assert (device.sms, device.bandwidth_fraction) == (98, 1.0)
    assert device.sm_fraction == pytest.approx(98 / 108)


def test_pascal_device_has_no_tensor_peak():
    assert resolve_device("p100").tensor_tflops is None


def test_whole_gpu_device_carries_the_peaks_and_datapath_facts():
    spec, device = find_gpu("rtx-4090"), resolve_device("NVIDIA GeForce RTX 4090")
    assert device.peak_tflops == spec.peak_tflops and device.peak_tflops is not spec.peak_tflops
    assert (device.fp32_lanes_per_sm, device.int32_shares_fp32_datapath, device.tensor_core_generation) == (128, True, 4)
    assert device.peak_tflops["fp8_tensor"] == 330.3
    hopper = resolve_device("h100-sxm")
    assert (hopper.fp32_lanes_per_sm, hopper.int32_shares_fp32_datapath, hopper.tensor_core_generation) == (128, False, 4)
    maxwell = resolve_device("TitanX")
    assert (maxwell.fp16_tflops, maxwell.tensor_tflops, maxwell.tensor_core_generation) == (None, None, None)
    assert maxwell.peak_tflops["fp32"] == 6.6 and maxwell.peak_tflops["fp16"] is None


def test_mig_slice_peaks_scale_by_the_sm_fraction():
    spec = find_gpu("a100-40gb")
    device = resolve_device("a100-40gb", "3g.20gb")
    assert device.sm_fraction == pytest.approx(42 / 108)
    assert list(device.peak_tflops) == list(PEAK_KEYS)
    for key, peak in spec.peak_tflops.items():
        if peak is None:
            assert device.peak_tflops[key] is None, key
        else:
            assert device.peak_tflops[key] == pytest.approx(peak * 42 / 108), key
    assert device.peak_tflops["bf16_tensor"] == pytest.approx(312 * 42 / 108)
    assert device.peak_tflops["fp64"] == pytest.approx(9.7 * 42 / 108)
    assert device.peak_tflops["fp8_tensor"] is None
    assert device.peak_tflops["fp32"] == device.fp32_tflops
    assert device.peak_tflops["fp16_tensor"] == device.tensor_tflops
    assert (device.fp32_lanes_per_sm, device.int32_shares_fp32_datapath, device.tensor_core_generation) == (64, False, 3)
    h100 = resolve_device("h100-sxm", "1g.10gb")
    assert h100.peak_tflops["fp8_tensor"] == pytest.approx(1978.9 * 16 / 132)


def test_every_device_has_the_peaks_of_its_gpu_scaled():
    for device in all_devices():
        spec = find_gpu(device.gpu)
        for key, peak in spec.peak_tflops.items():
            scaled = device.peak_tflops[key]
            assert (scaled is None) == (peak is None)
            if peak is not None:
                assert scaled == pytest.approx(peak * device.sm_fraction)


def test_devices_and_gpus_stay_hashable():
    """The peak dicts are left out of the hash, so devices can still key a dict or fill a set."""
    assert len({resolve_device("a10g"), resolve_device("a10g"), resolve_device("t4")}) == 2
    assert hash(find_gpu("t4")) == hash(find_gpu("Tesla T4"))


# The Device fields the trained latency model and the CLI read, as they were before the peaks were added.
LEGACY_DEVICE_FIELDS = [
    "name", "gpu", "mig", "architecture", "compute_capability", "sms", "memory_gb", "memory_bandwidth_gbs",
    "l2_mb", "boost_clock_mhz", "fp32_tflops", "fp16_tflops", "tensor_tflops", "sm_fraction", "l2_fraction",
    "bandwidth_fraction", "board_power_w",
]


def test_device_keeps_its_legacy_fields_in_order():
    names = [field.name for field in dataclasses.fields(resolve_device("t4"))]
    assert names[:len(LEGACY_DEVICE_FIELDS)] == LEGACY_DEVICE_FIELDS
    assert names[len(LEGACY_DEVICE_FIELDS):] == [
        "peak_tflops", "fp32_lanes_per_sm", "int32_shares_fp32_datapath", "tensor_core_generation", "memory_gib",
        "memory_gib_source"]
    device = resolve_device("a100-80gb", "1g.10gb")
    assert (device.fp32_tflops, device.tensor_tflops, device.board_power_w) == (
        pytest.approx(19.5 * 14 / 108), pytest.approx(312 * 14 / 108), 400.0)


def test_all_devices_lists_every_gpu_and_every_mig_profile():
    devices = all_devices()
    expected = len(all_gpus()) + sum(len(gpu.mig_profiles) for gpu in all_gpus())
    assert len(devices) == expected
    assert len({device.name for device in devices}) == expected
    assert resolve_device("a100-80gb", "1g.10gb") in devices
    assert [d.name for d in devices if d.gpu == "a30"] == [
        "a30", "a30/1g.6gb", "a30/1g.6gb+me", "a30/2g.12gb", "a30/2g.12gb+me", "a30/4g.24gb"]


def test_to_dict_is_json_and_includes_mig_profiles():
    entries = json.loads(json.dumps([gpu.to_dict() for gpu in all_gpus()]))
    a30 = next(entry for entry in entries if entry["name"] == "a30")
    assert a30["sms"] == 56 and a30["aliases"] == ["a30-pcie", "a30-24gb"]
    assert a30["mig_profiles"][0] == {
        "name": "1g.6gb", "compute_slices": 1, "memory_slices": 1, "sms": 14, "memory_gb": 6,
        "max_instances": 4, "l2_fraction": 0.25, "bandwidth_fraction": 0.25, "memory_gib": 5.81,
        "memory_source": "https://github.com/Summer-Lo/Docker_configuration/blob/main/000-MIG/README.md",
    }
    assert json.loads(json.dumps(resolve_device("a30", "2g.12gb").to_dict()))["sms"] == 28


def test_memory_a_process_sees_is_nvidia_smi_s_where_a_printout_gives_it():
    """Fits were judged against the nominal size read as GiB: an L4's "24 GB" is 23034 MiB (22.5 GiB) in nvidia-smi,
    an H200 1g.18gb slice 16.00 GiB in `nvidia-smi mig -lgip`."""
    l4, h200_slice = resolve_device("l4"), resolve_device("h200", "1g.18gb")
    assert (l4.memory_gb, l4.memory_gib, l4.memory_gib_source) == (
        24, 23034 / 1024, "https://github.com/modal-labs/modal-client/pull/2797")
    assert (h200_slice.memory_gb, h200_slice.memory_gib) == (18, 16.0)
    assert h200_slice.memory_gib_source == "https://github.com/NVIDIA/mig-parted/issues/120"
    assert resolve_device("h100-sxm").memory_gib == 81559 / 1024
    a100_slice = resolve_device("a100-sxm4-80gb", "1g.10gb")  # 9.50 GiB, 9728 MiB: it was read as 10 GiB
    assert (a100_slice.memory_gib, a100_slice.memory_gib_source) == (9.5, (
        "https://github.com/kata-containers/kata-containers/blob/main/docs/use-cases/NVIDIA-GPU-passthrough-and-Kata.md"))
    assert [resolve_device("a100-pcie-80gb", p).memory_gib for p in ("1g.20gb", "3g.40gb", "7g.80gb")] == [19.5, 39.25, 79.0]
    assert [resolve_device("a30", p).memory_gib for p in ("1g.6gb", "2g.12gb+me", "4g.24gb")] == [5.81, 11.69, 23.5]
    h100_slice = resolve_device("h100-pcie", "1g.10gb")  # no public lgip listing with its memory: nominal
    assert (h100_slice.memory_gib, h100_slice.memory_gib_source) == (10, "nominal")
    assert resolve_device("a100-sxm4-80gb").memory_gib == 80.0  # 81920 MiB
    for device in all_devices():
        assert 0.8 * device.memory_gb <= device.memory_gib <= device.memory_gb, device.name
        # no slice holds more than its board (H100 NVL's 7g.94gb read as 94 GiB did: the board shows 93.58)
        assert device.memory_gib <= resolve_device(device.gpu).memory_gib, device.name
    nvl = resolve_device("h100-nvl", "7g.94gb")
    assert (nvl.memory_gib, nvl.memory_gib_source) == (
        92.62, "https://github.com/OpenNebula/website/blob/master/content/product/cluster_configuration/"
        "hosts_and_clusters/vgpu.md")
    assert resolve_device("h100-nvl", "3g.47gb").memory_gib_source == "https://github.com/NVIDIA/mig-parted/pull/101"
    assert [resolve_device("a100-pcie-40gb", p).memory_gib for p in ("1g.5gb", "2g.10gb", "4g.20gb", "7g.40gb")] == [
        4.75, 9.62, 19.5, 39.25]


def test_to_dict_carries_the_new_fields():
    entry = json.loads(json.dumps(find_gpu("b200").to_dict()))
    assert entry["peak_tflops"] == {
        "fp64": 37.0, "fp32": 75.0, "fp16": 150.0, "bf16": 150.0, "int8": 150.0, "tf32_tensor": 1100.0,
        "fp16_tensor": 2250.0, "bf16_tensor": 2250.0, "fp8_tensor": 4500.0, "int8_tensor": 4500.0,
        "int4_tensor": None, "fp4_tensor": 9000.0,
    }
    assert (entry["memory_type"], entry["fp32_lanes_per_sm"], entry["int32_shares_fp32_datapath"],
            entry["tensor_core_generation"]) == ("HBM3e", 128, False, 5)
    device = json.loads(json.dumps(resolve_device("h100-sxm", "3g.40gb").to_dict()))
    assert device["peak_tflops"]["bf16_tensor"] == pytest.approx(989.4 * 60 / 132)
    assert device["tensor_core_generation"] == 4


@pytest.mark.parametrize(("change", "message"), [
    ({"memory_type": "DDR4"}, "memory_type 'DDR4'"),
    ({"architecture": "Kepler"}, "architecture 'Kepler'"),
    ({"fp32_lanes_per_sm": 96}, "fp32_lanes_per_sm must be 64 or 128"),
    ({"int32_shares_fp32_datapath": "yes"}, "int32_shares_fp32_datapath must be true or false"),
    ({"tensor_core_generation": 6}, "tensor_core_generation must be 1-5 or null"),
    ({"tensor_core_generation": None}, "must both be null"),
])
def test_loader_refuses_bad_new_fields(change, message):
    entry = _raw_entry("a10g")
    entry.update(change)
    with pytest.raises(ValueError, match=re.escape(message)):
        _parse_gpu(entry, {})


@pytest.mark.parametrize(("key", "value", "message"), [
    ("fp32", 36.0, "peak_tflops.fp32 = 36.0 disagrees with the entry's legacy figure 35.0"),
    ("fp16_tensor", 141.0, "peak_tflops.fp16_tensor = 141.0 disagrees"),
    ("fp16", 70.0, "peak_tflops.fp16 = 70.0 disagrees"),
    ("bf16_tensor", -1.0, "peak_tflops.bf16_tensor must be a positive number or null"),
    ("fp6_tensor", 1.0, "unknown: ['fp6_tensor']"),
])
def test_loader_refuses_bad_peaks(key, value, message):
    entry = _raw_entry("a10g")
    entry["peak_tflops"] = {**entry["peak_tflops"], key: value}
    with pytest.raises(ValueError, match=re.escape(message)):
        _parse_gpu(entry, {})


def test_loader_refuses_a_missing_peak():
    entry = _raw_entry("a10g")
    del entry["peak_tflops"]["fp8_tensor"]
    with pytest.raises(ValueError, match=re.escape("missing: ['fp8_tensor']")):
        _parse_gpu(entry, {})


def test_the_parsed_copy_is_the_yaml_parse_and_follows_an_edit(tmp_path, monkeypatch):
    """The JSON copy in the cache folder gives what PyYAML gives, types and order included; an edited text is parsed
    again (and its copy replaces the old one); an unwritable cache folder only costs the parse."""
    monkeypatch.setenv("LILOU_CACHE_DIR", str(tmp_path))
    text = resources.files("lilou.hardware").joinpath("gpus.yaml").read_text(encoding="utf-8")
    parsed = yaml.safe_load(text)
    assert repr(_parsed(text)) == repr(parsed)  # parsed, the copy written
    assert (tmp_path / PARSED_COPY).exists()
    assert repr(_parsed(text)) == repr(parsed)  # read from the copy
    edited = text.replace("gpus:", "gpus:\n  # an edit", 1)
    assert edited != text and repr(_parsed(edited)) == repr(parsed)
    (tmp_path / PARSED_COPY).write_text(json.dumps({"sha256": "0" * 64, "database": {"gpus": []}}))
    assert _parsed(text)["gpus"] == parsed["gpus"]  # a copy of another text is not read
    (tmp_path / PARSED_COPY).write_text("{")  # nor a broken one
    assert _parsed(text)["gpus"] == parsed["gpus"]
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("LILOU_CACHE_DIR", str(tmp_path / "file"))
    assert repr(_parsed(text)) == repr(parsed)


def _raw_entry(name: str) -> dict:
    """One entry of gpus.yaml as the loader reads it."""
    text = resources.files("lilou.hardware").joinpath("gpus.yaml").read_text(encoding="utf-8")
    entry = next(entry for entry in yaml.safe_load(text)["gpus"] if entry["name"] == name)
    return {**entry, "peak_tflops": dict(entry["peak_tflops"])}


# ---------------------------------------------------------------------------- datasets


@pytest.fixture(scope="module")
def datasets(datasets_dir) -> Path:
    return datasets_dir


# Every device name the datasets use, and the database entry it must map to.
NEUSIGHT_DEVICES = {
    "Tesla P4": "p4",
    "Tesla P100-PCIE-16GB": "p100-pcie-16gb",
    "Tesla T4": "t4",
    "Tesla V100-PCIE-32GB": "v100-pcie-32gb",
    "NVIDIA A100-PCIE-40GB": "a100-pcie-40gb",
    "NVIDIA A100 80GB PCIe": "a100-pcie-80gb",
    "NVIDIA A100-SXM4-40GB": "a100-sxm4-40gb",
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "NVIDIA L4": "l4",
}
WATTGPU_DEVICES = {
    "NVIDIA A30": "a30",
    "NVIDIA H200": "h200",  # TechPowerUp's row is the H200 NVL: same SMs, bandwidth within 2 %
    "NVIDIA A100-SXM4-40GB": "a100-sxm4-40gb",
    "NVIDIA L40S": "l40s",
    "NVIDIA H100 PCIe": "h100-pcie",
    "NVIDIA H100 NVL": "h100-nvl",
    "Tesla V100-SXM2-32GB": "v100-sxm2-32gb",
    "NVIDIA L4": "l4",
    "NVIDIA GeForce RTX 3090": "rtx-3090",
    "Tesla T4": "t4",
    "NVIDIA GeForce RTX 4090": "rtx-4090",
}

BANDWIDTH_TOLERANCE = 0.05  # datasets round differently (H100 SXM: 3430 vs NVIDIA's 3350 GB/s)

# SM counts where a dataset is wrong: {device: (dataset's figure, why ours differs)}.
NEUSIGHT_SM_EXCEPTIONS = {
    "Tesla P4": (40, "NeuSight counts 2560 cores as 40 SMs x 64; GP104 has 128 cores per SM, so 20 SMs"),
    "NVIDIA L4": (60, "NeuSight lists the full AD104's 60 SMs; the L4 enables 58 (deviceQuery: 58 x 128 = 7424)"),
}
WATTGPU_SM_EXCEPTIONS = {
    "NVIDIA L4": (60, "TechPowerUp's SM column says 60, but its own 30290 GFLOPS FP32 = 58 SMs x 128 x 2 x 2.04 GHz"),
}


def _neusight_kernel_devices(datasets: Path) -> set[str]:
    devices: set[str] = set()
    for path in sorted((datasets / "neusight" / "kernels").rglob("*.csv")):
        with path.open(newline="") as handle:
            rows = csv.reader(handle)
            column = next(rows).index("Device")
            devices.update(row[column] for row in rows)
    return devices


def _neusight_configs(datasets: Path) -> list[tuple[Path, dict]]:
    paths = sorted((datasets / "neusight" / "device_configs").glob("*.json"))
    return [(path, json.loads(path.read_text())) for path in paths]


def _wattgpu_rows(datasets: Path) -> list[dict[str, str]]:
    with (datasets / "wattgpu" / "gpu_features.csv").open(newline="") as handle:
        return list(csv.DictReader(handle, delimiter=";"))


def test_every_neusight_kernel_device_maps_to_its_gpu(datasets):
    devices = _neusight_kernel_devices(datasets)
    assert devices, "no Device values found in neusight/kernels"
    assert sorted(devices - set(NEUSIGHT_DEVICES)) == [], "new device in the data: add it to NEUSIGHT_DEVICES"
    for device in devices:
        assert gpu_for_dataset_device(device).name == NEUSIGHT_DEVICES[device]


def test_every_neusight_config_name_maps_to_its_gpu(datasets):
    configs = _neusight_configs(datasets)
    assert len(configs) == 9
    for path, config in configs:
        expected = NEUSIGHT_DEVICES[config["Device"]]
        assert gpu_for_dataset_device(config["Device"]).name == expected
        assert gpu_for_dataset_device(path.stem).name == expected  # underscores instead of spaces


def test_database_agrees_with_neusight_device_configs(datasets):
    """Num_Sm exact (bar documented errors), Mem_Bw within 5 %, L2Cache (MB) exact."""
    for _, config in _neusight_configs(datasets):
        device = config["Device"]
        gpu = gpu_for_dataset_device(device)
        if device in NEUSIGHT_SM_EXCEPTIONS:
            assert config["Num_Sm"] == NEUSIGHT_SM_EXCEPTIONS[device][0] != gpu.sms
        else:
            assert gpu.sms == config["Num_Sm"], device
        assert gpu.memory_bandwidth_gbs == pytest.approx(config["Mem_Bw"], rel=BANDWIDTH_TOLERANCE), device
        assert gpu.l2_mb == config["L2Cache"], device


def test_database_agrees_with_wattgpu_features(datasets):
    """TechPowerUp's streaming_multiprocessors exact (bar documented errors), bandwidth within 5 %."""
    rows = _wattgpu_rows(datasets)
    assert sorted(row["gpu_type"] for row in rows) == sorted(WATTGPU_DEVICES)
    for row in rows:
        device = row["gpu_type"]
        gpu = gpu_for_dataset_device(device)
        assert gpu.name == WATTGPU_DEVICES[device]
        sms = int(row["streaming_multiprocessors"])
        if device in WATTGPU_SM_EXCEPTIONS:
            assert sms == WATTGPU_SM_EXCEPTIONS[device][0] != gpu.sms
        else:
            assert gpu.sms == sms, device
        bandwidth = float(row["memory_bandwidth_gb_s"])
        assert gpu.memory_bandwidth_gbs == pytest.approx(bandwidth, rel=BANDWIDTH_TOLERANCE), device


# AIConfigurator's `device` column (torch.cuda.get_device_name) per system folder; b60 is Intel, not ours.
AICONFIGURATOR_DEVICES = {
    "NVIDIA A100-SXM4-80GB": "a100-sxm4-80gb",
    "NVIDIA L40S": "l40s",
    "NVIDIA H200": "h200",
    "NVIDIA B200": "b200",
    "NVIDIA GB200": "gb200",
    "NVIDIA B300 SXM6 AC": "b300",
    "NVIDIA GB300": "gb300",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtx-pro-6000-blackwell-server",
}
NOT_NVIDIA = {"Intel(R) Arc(TM) Pro B60 Graphics"}
LIGER_DEVICES = {
    "NVIDIA A100-SXM4-80GB": "a100-sxm4-80gb",
    "NVIDIA GeForce RTX 3090": "rtx-3090",
    "NVIDIA GeForce RTX 4090": "rtx-4090",
    "NVIDIA B200": "b200",
}
# DeepBench's file tag and its Specs sheet's GPU model. Its V100 ran in a DGX-1 and the P100 board is
# not stated; the bare names resolve to the database's default V100 / P100 and the DeepBench reader
# may pick a board itself.
DEEPBENCH_DEVICES = {
    ("M40", "Nvidia Tesla M40"): "m40-24gb",
    ("TitanX", "Nvidia TitanX"): "gtx-titan-x",
    ("1080Ti", "Nvidia 1080Ti"): "gtx-1080-ti",
    ("1080Ti", "NVIDIA GTX 1080 Ti"): "gtx-1080-ti",
    ("TitanX_Pascal", "Nvidia TitanX Pascal"): "titan-x-pascal",
    ("TitanXp", "Nvidia TitanXp"): "titan-xp",
    ("TitanXp", "NVIDIA GTX TitanXp"): "titan-xp",
    ("P100", "NVIDIA Tesla P100"): "p100-pcie-16gb",
    ("V100", "NVIDIA V100"): "v100-sxm2-32gb",
    ("T4", "NVIDIA T4"): "t4",
}


def test_every_aiconfigurator_device_maps_to_its_gpu(datasets):
    devices: set[str] = set()
    for path in sorted((datasets / "aiconfigurator" / "data").rglob("*.parquet")):
        devices.update(pq.read_table(path, columns=["device"]).column("device").to_pylist())
    assert devices, "no device values found in aiconfigurator/data"
    assert sorted(devices - set(AICONFIGURATOR_DEVICES) - NOT_NVIDIA) == [], "new device: add it above"
    for device in devices - NOT_NVIDIA:
        assert gpu_for_dataset_device(device).name == AICONFIGURATOR_DEVICES[device]


def test_every_liger_kernel_device_maps_to_its_gpu(datasets):
    devices: set[str] = set()
    for path in sorted((datasets / "liger_kernel").glob("all_benchmark_data*.csv")):
        with path.open(newline="") as handle:
            devices.update(row["gpu_name"] for row in csv.DictReader(handle))
    assert sorted(devices - set(LIGER_DEVICES)) == [], "new device in the data: add it to LIGER_DEVICES"
    for device in devices:
        assert gpu_for_dataset_device(device).name == LIGER_DEVICES[device]


def test_every_deepbench_device_maps_to_its_gpu(datasets):
    pairs: set[tuple[str, str]] = set()
    for name in ("gemm_tidy.csv", "conv_tidy.csv", "rnn_tidy.csv"):
        with (datasets / "deepbench" / name).open(newline="") as handle:
            pairs.update((row["gpu"], row["gpu_model"]) for row in csv.DictReader(handle))
    assert sorted(pairs - set(DEEPBENCH_DEVICES)) == [], "new device in the data: add it to DEEPBENCH_DEVICES"
    for (tag, model) in pairs:
        expected = DEEPBENCH_DEVICES[(tag, model)]
        assert gpu_for_dataset_device(tag).name == expected
        assert gpu_for_dataset_device(model).name == expected


def test_database_agrees_with_aiconfigurator_system_files(datasets):
    """AIConfigurator's per-system yaml: dense BF16 tensor peak within 5 % (its RTX PRO 6000 figure is
    scaled to the 2430 MHz it observed, as ours is), DRAM bandwidth within 5 %, power exact."""
    systems = {"a100_sxm": "a100-sxm4-80gb", "l40s": "l40s", "h200_sxm": "h200", "b200_sxm": "b200",
               "gb200": "gb200", "b300_sxm": "b300", "gb300": "gb300", "rtx_pro_6000_server": "rtx-pro-6000-blackwell-server"}
    for system, name in systems.items():
        spec = yaml.safe_load((datasets / "aiconfigurator" / f"{system}.yaml").read_text())["gpu"]
        gpu = find_gpu(name)
        assert gpu.peak_tflops["bf16_tensor"] == pytest.approx(spec["bfloat16_tc_flops"] / 1e12, rel=0.05), name
        if "fp8_tc_flops" in spec:
            assert gpu.peak_tflops["fp8_tensor"] == pytest.approx(spec["fp8_tc_flops"] / 1e12, rel=0.05), name
        if "fp4_tc_flops" in spec:
            assert gpu.peak_tflops["fp4_tensor"] == pytest.approx(spec["fp4_tc_flops"] / 1e12, rel=0.05), name
        assert gpu.memory_bandwidth_gbs == pytest.approx(spec["mem_bw"] / 1e9, rel=BANDWIDTH_TOLERANCE), name
        assert gpu.tdp_w == spec["power"], name
        assert gpu.compute_capability == f"{spec['sm_version'] // 10}.{spec['sm_version'] % 10}", name


def test_unknown_dataset_device_says_where_to_add_it():
    with pytest.raises(LilouInputError) as error:
        gpu_for_dataset_device("NVIDIA GeForce GT 730")
    assert str(error.value) == (
        "unknown dataset device 'NVIDIA GeForce GT 730'; add its spelling as an alias in lilou/hardware/gpus.yaml"
    )
