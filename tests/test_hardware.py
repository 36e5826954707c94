"""The GPU and MIG database: contents, lookups, MIG slices, and agreement with the datasets."""
from __future__ import annotations

import csv
import dataclasses
import json
import re
from pathlib import Path

import pytest

from lilou.errors import LilouInputError
from lilou.hardware import (
    all_devices,
    all_gpus,
    find_gpu,
    gpu_for_dataset_device,
    resolve_device,
)
from lilou.hardware.database import _index_by_key

# ---------------------------------------------------------------------------- contents

REQUIRED = [
    "t4", "p4", "p100-pcie-16gb", "v100-pcie-32gb", "v100-sxm2-32gb", "a10", "a10g", "a30", "a40",
    "a100-pcie-40gb", "a100-sxm4-40gb", "a100-pcie-80gb", "a100-sxm4-80gb", "l4", "l40s",
    "h100-pcie", "h100-sxm", "h100-nvl", "h200", "rtx-2080-ti", "rtx-3090", "rtx-4090",
    "gtx-1080-ti", "titan-x-pascal", "titan-xp", "titan-rtx",
]


def test_database_holds_every_required_gpu():
    names = [gpu.name for gpu in all_gpus()]
    assert len(names) >= 24
    assert len(set(names)) == len(names)
    assert sorted(set(REQUIRED) - set(names)) == []


def test_all_gpus_is_loaded_once_and_returns_a_fresh_list():
    first, second = all_gpus(), all_gpus()
    assert first == second and first is not second
    assert all(a is b for a, b in zip(first, second))


@pytest.mark.parametrize("gpu", all_gpus(), ids=lambda gpu: gpu.name)
def test_every_entry_is_complete_and_cites_a_source(gpu):
    assert gpu.architecture in {"Pascal", "Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper"}
    assert re.fullmatch(r"\d\.\d", gpu.compute_capability)
    numbers = [gpu.sms, gpu.boost_clock_mhz, gpu.memory_gb, gpu.memory_bandwidth_gbs, gpu.l2_mb,
               gpu.fp32_tflops, gpu.fp16_tflops, gpu.tdp_w]
    assert all(isinstance(n, (int, float)) and n > 0 for n in numbers)
    assert gpu.source and all(url.startswith("https://") for url in gpu.source)
    # Only Pascal lacks tensor cores; everything newer has a dense FP16 tensor figure.
    assert (gpu.tensor_tflops is None) == (gpu.architecture == "Pascal")


FP32_LANES_PER_SM = {"6.0": 64, "6.1": 128, "7.0": 64, "7.5": 64, "8.0": 64, "8.6": 128, "8.9": 128, "9.0": 128}


@pytest.mark.parametrize("gpu", all_gpus(), ids=lambda gpu: gpu.name)
def test_fp32_peak_agrees_with_sms_and_clock(gpu):
    """Catches typos: peak FP32 = SMs x FP32 lanes x 2 (FMA) x boost clock, within rounding (2 %)."""
    derived = gpu.sms * FP32_LANES_PER_SM[gpu.compute_capability] * 2 * gpu.boost_clock_mhz / 1e6
    assert gpu.fp32_tflops == pytest.approx(derived, rel=0.02)


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


def test_unknown_gpu_suggests_the_closest_names_on_one_line():
    with pytest.raises(LilouInputError) as error:
        find_gpu("a10x")
    assert str(error.value) == "unknown GPU 'a10x'; did you mean: a10, a100, a10g?"


def test_unknown_gpu_without_close_names_points_to_the_list():
    with pytest.raises(LilouInputError) as error:
        find_gpu("quadro")
    assert str(error.value) == "unknown GPU 'quadro'; `lilou gpus` lists the known GPUs"


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


def test_invalid_mig_profile_lists_the_valid_ones():
    with pytest.raises(LilouInputError) as error:
        find_gpu("a100-40gb").mig_profile("1g.10gb+me")
    assert str(error.value) == (
        "GPU 'a100-sxm4-40gb' has no MIG profile '1g.10gb+me'; valid profiles: "
        "1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"
    )


def test_mig_on_a_gpu_without_mig_says_so():
    with pytest.raises(LilouInputError) as error:
        resolve_device("t4", "1g.5gb")
    assert str(error.value) == "GPU 't4' has no MIG support, so it has no profile '1g.5gb'"


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
        "max_instances": 4, "l2_fraction": 0.25, "bandwidth_fraction": 0.25,
    }
    assert json.loads(json.dumps(resolve_device("a30", "2g.12gb").to_dict()))["sms"] == 28


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


def test_unknown_dataset_device_says_where_to_add_it():
    with pytest.raises(LilouInputError) as error:
        gpu_for_dataset_device("NVIDIA GeForce GT 730")
    assert str(error.value) == (
        "unknown dataset device 'NVIDIA GeForce GT 730'; add its spelling as an alias in lilou/hardware/gpus.yaml"
    )
