"""Transposed convolutions (ONNX ``ConvTranspose``) as the kernels PyTorch runs: a convolution's input gradient.

``nn.ConvTranspose2d`` runs cuDNN's backward-data kernel (dgrad) of the convolution whose input gradient it
computes: the convolution from the transpose's output shape to its input shape, with the same weight, strides and
pads. A kernel of this kind is therefore described as that forward convolution (the same FLOPs and its implicit
GEMM: :func:`lilou.latency.kernel_model.kernel.describe_kernel`), priced by the convolution models, which learned
forward convolutions only, and multiplied by the ratio backward-data / forward that DeepBench measured for the same
shape on the same GPU. That ratio is about 1 at stride 1 and about 2 for strided convolutions (upsampling
decoders, GAN generators), where the dgrad kernel walks every filter tap for each output pixel and discards the
ones the stride skips. One ratio per stride class (``unit_stride``, ``strided``), each the median over GPUs of
that GPU's median, so every GPU counts once (``scripts/fit_transposed_conv.py`` -> ``transposed_conv.json``
beside this module, with the GPUs and architectures it rests on). No source measured a backward-data kernel on
Ampere or a later architecture: there the ratio is an extrapolation and the kernels are flagged.
"""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from lilou.hardware.database import architecture_class

PARAMETERS_FILE = "transposed_conv.json"
#: The shape columns that pin one DeepBench convolution down (a backward-data row pairs with the forward row of
#: the same GPU, dtype, subset and these values).
SHAPE_FIELDS = ("batch", "in_c", "in_h", "in_w", "out_c", "kernel_h", "kernel_w", "stride_h", "stride_w", "pad_h",
                "pad_w")


@dataclass(frozen=True)
class DgradRatios:
    """Measured backward-data / forward time of one convolution, per stride class, and where it was measured."""

    unit_stride: float
    strided: float
    architectures: tuple[str, ...]  # architecture classes (lilou.hardware.database.architecture_class) with rows

    def factor(self, strides: np.ndarray) -> np.ndarray:
        """The ratio for each kernel of stride ``strides`` (the largest stride of its window)."""
        return np.where(np.asarray(strides) > 1, self.strided, self.unit_stride)


@lru_cache(maxsize=1)
def load_ratios() -> DgradRatios:
    """The shipped ratios (``transposed_conv.json``)."""
    data = json.loads(resources.files("lilou.latency.kernel_model").joinpath(PARAMETERS_FILE).read_text())
    return DgradRatios(unit_stride=float(data["ratio"]["unit_stride"]), strided=float(data["ratio"]["strided"]),
                       architectures=tuple(data["architectures"]))


def stride_class(stride_h: int, stride_w: int) -> str:
    return "strided" if max(stride_h, stride_w) > 1 else "unit_stride"


def paired_ratios(rows: Iterable[Mapping]) -> list[dict]:
    """Backward-data / forward time of each convolution measured both ways on one GPU (rows of the kernel table:
    ``gpu``, ``dtype``, ``subset``, ``mode``, :data:`SHAPE_FIELDS`, ``latency_ms``)."""
    forward: dict[tuple, float] = {}
    backward: dict[tuple, float] = {}
    for row in rows:
        key = (row["gpu"], row["dtype"], row["subset"], *(row[f] for f in SHAPE_FIELDS))
        if None in key or not row["latency_ms"]:
            continue
        if row["mode"] == "forward":
            forward[key] = float(row["latency_ms"])
        elif row["mode"] == "backward-data":
            backward[key] = float(row["latency_ms"])
    pairs = []
    for key, time in backward.items():
        if key in forward:
            shape = dict(zip(SHAPE_FIELDS, key[3:]))
            pairs.append({"gpu": key[0], "dtype": key[1], **shape, "forward_ms": forward[key], "backward_data_ms": time,
                          "ratio": time / forward[key],
                          "stride_class": stride_class(shape["stride_h"], shape["stride_w"])})
    return pairs


def fit_ratios(pairs: Iterable[Mapping]) -> dict[str, dict]:
    """Per stride class: the median over GPUs of each GPU's median ratio, with the per-GPU medians and row counts."""
    import statistics  # here, not at the top: only the fit needs it, and `lilou infer` imports this module

    by_gpu: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for pair in pairs:
        by_gpu[pair["stride_class"]][pair["gpu"]].append(pair["ratio"])
    out = {}
    for cls, gpus in sorted(by_gpu.items()):
        medians = {gpu: statistics.median(values) for gpu, values in sorted(gpus.items())}
        out[cls] = {"ratio": statistics.median(medians.values()), "gpus": medians,
                    "rows": {gpu: len(values) for gpu, values in sorted(gpus.items())}}
    return out


def backward_data_rows(data_dir=None, dtype: str = "fp32"):
    """DeepBench's backward-data convolutions of ``dtype`` as the ``ConvTranspose`` kernels that run them
    (a :class:`lilou.latency.kernel_model.dataset.KernelDataset`), each row's filter as ``"KhxKw"`` (by dataset
    row), and the measured forward / backward-data pairs of that dtype (:func:`paired_ratios`). For the folds of
    ``make bench-conv-geometry`` and ``make calibrate``."""
    from lilou.data.kernel_table import kernel_table
    from lilou.latency.kernel_model.dataset import dataset_from_sample
    from lilou.latency.kernel_model.table_kernels import table_kernels
    from lilou.latency.kernel_model.table_sample import sample_table

    relation = kernel_table(["deepbench"], data_dir).filter(f"dtype = '{dtype}' AND family = 'conv'")
    sample = sample_table(relation, per_group=2**31 - 1, mode="backward-data")
    priced = table_kernels(sample, use_units=True)
    filters = {i: f"{sample['kernel_h'][j]}x{sample['kernel_w'][j]}" for i, j in enumerate(priced.index)}
    columns = ["gpu", "dtype", "subset", "mode", *SHAPE_FIELDS, "latency_ms"]
    pairs = paired_ratios(relation.project(", ".join(columns)).to_arrow_table().to_pylist())
    return dataset_from_sample(sample), filters, pairs


def held_out_prices(predictor, rows, pairs: Iterable[Mapping], architecture: str) -> tuple[np.ndarray, np.ndarray]:
    """(as a forward convolution, x the ratio) latency (ms) of ``rows`` (backward-data rows of ``architecture``) by a
    fold ``predictor`` that never saw the architecture, the ratio refitted on the other architectures' ``pairs``."""
    fitted = fit_ratios([p for p in pairs if architecture_class(p["gpu"]) != architecture])
    factor = np.where(rows.kernels.conv_stride > 1, fitted["strided"]["ratio"], fitted["unit_stride"]["ratio"])
    prediction = predictor.predict(rows.kernels, rows.devices, rows.timing)
    return prediction.latency_ms, prediction.floor_ms + prediction.work_ms * factor
