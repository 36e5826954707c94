"""Rows of the kernel-measurement table -> the kernel model's inputs (:class:`KernelBatch`, devices).

Each row of a family the model prices (gemm, bmm, conv, elementwise, norm, softmax) becomes the
ONNX nodes that compute what was measured, with tensors of the row's precision, and goes
through :func:`lilou.latency.kernel_model.kernel.describe_kernel` like any kernel group of a real graph.
A convolution's backward-data row (``mode``) becomes the ``ConvTranspose`` that runs that kernel.
Rows whose shape the table does not pin down are skipped and counted.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from lilou.graph.costs import CostInput, TensorInfo
from lilou.hardware import resolve_device
from lilou.latency.kernel_model.features import DeviceColumns, KernelBatch
from lilou.latency.kernel_model.kernel import KernelSpec, describe_kernel

#: Table families the kernel model prices, and the model family each maps to.
PRICED_FAMILIES = {"gemm": "gemm", "bmm": "gemm", "conv": "conv", "elementwise": "elementwise",
                   "norm": "layernorm", "softmax": "softmax"}
#: Bytes per element of each table dtype (int4/fp4 packed two to a byte: counted as one, a bound).
ITEMSIZE = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 1, "fp4": 1}
_ONNX_TYPE = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8": "float8e4m3fn",
              "int8": "int8", "int4": "int4", "fp4": "float4e2m1"}
#: Quantisation modes whose activations stay BF16 into the GEMM (the kernel dequantises the weights).
WEIGHT_ONLY = frozenset({"int4-weight-only", "int8-weight-only"})
#: Elementwise ops with one input tensor (the rest combine two tensors of the same shape, or a scalar).
_UNARY = {"relu": "Relu", "gelu": "Gelu", "tanh": "Tanh"}
_SCALAR = {"addu": "Add", "mulu": "Mul", "divu": "Div", "powu": "Pow"}
_BINARY = {"add": "Add", "mul": "Mul", "div": "Div", "pow": "Pow"}


@dataclass(frozen=True)
class TableKernels:
    """The priced rows: which table rows (``index``), their kernels and devices."""

    index: np.ndarray
    kernels: KernelBatch
    devices: DeviceColumns
    skipped: dict[str, int]


def _tensor(name: str, shape, dtype: str) -> TensorInfo:
    return TensorInfo(name, tuple(int(d) for d in shape), _ONNX_TYPE[dtype], ITEMSIZE[dtype])


def row_nodes(row: dict) -> list[CostInput] | None:
    """The ONNX nodes of one table row, or None when its shape is not pinned down."""
    family, dtype, op = row["family"], row["dtype"], row["op"]

    def t(name, shape):
        return _tensor(name, shape, dtype)

    if family in ("gemm", "bmm"):
        batch, m, n, k = (row.get(f) for f in ("batch", "m", "n", "k"))
        if None in (m, n, k):
            return None
        batch = batch or 1
        quant = row.get("quant")
        # a quantised Linear reads and writes BF16 activations; with activation scales (FP8, NVFP4, SmoothQuant)
        # it first casts them to the weights' type (the measured time includes that), weight-only ones do not
        activation = "bf16" if quant else dtype
        a_shape = (batch, m, k) if batch > 1 else (m, k)
        a = _tensor("a", a_shape, activation)
        b = t("b", (batch, k, n) if family == "bmm" and batch > 1 else (k, n))
        out = _tensor("y", (batch, m, n) if batch > 1 else (m, n), activation)
        nodes = []
        if quant and quant not in WEIGHT_ONLY:
            quantised = t("a_q", a_shape)
            nodes.append(CostInput("Cast", {}, [a], [quantised]))
            a = quantised
        nodes.append(CostInput("MatMul", {}, [a, b], [out]))
        if row.get("bias"):
            nodes.append(CostInput("Add", {}, [out, t("bias", (n,))], [t("z", out.shape)]))
        return nodes
    if family == "conv":
        fields = ("batch", "in_c", "in_h", "in_w", "out_c", "kernel_h", "kernel_w", "stride_h", "stride_w", "pad_h",
                  "pad_w")
        values = [row.get(f) for f in fields]
        if None in values:
            return None
        n, c, h, w, co, kh, kw, sh, sw, ph, pw = values
        groups = row.get("groups") or 1
        oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
        if oh <= 0 or ow <= 0:
            return None
        attributes = {"kernel_shape": [kh, kw], "strides": [sh, sw], "pads": [ph, pw, ph, pw], "group": groups}
        if row.get("mode") == "backward-data":  # the input gradient: what a ConvTranspose of this weight runs
            return [CostInput("ConvTranspose", attributes, [t("dy", (n, co, oh, ow)), t("w", (co, c // groups, kh, kw))],
                              [t("dx", (n, c, h, w))])]
        return [CostInput("Conv", attributes, [t("x", (n, c, h, w)), t("w", (co, c // groups, kh, kw))],
                          [t("y", (n, co, oh, ow))])]
    rows, cols = row.get("rows"), row.get("cols")
    if rows is None or cols is None:
        return None
    x, y = t("x", (rows, cols)), t("y", (rows, cols))
    if family == "norm":
        return [CostInput("LayerNormalization", {"axis": -1}, [x, t("s", (cols,)), t("b", (cols,))], [y])]
    if family == "softmax":
        return [CostInput("Softmax", {"axis": -1}, [x], [y])]
    if op in _UNARY:
        return [CostInput(_UNARY[op], {}, [x], [y])]
    if op in _SCALAR:
        return [CostInput(_SCALAR[op], {}, [x, t("s", ())], [y])]
    if op in ("mlp_act",):  # SiLU-and-mul: [rows, 2h] -> [rows, h]
        half = t("h", (rows, cols // 2))
        return [CostInput("Mul", {}, [x], [half])]
    # add / mul / div / pow, residual adds, RoPE (x times cos/sin tables of the same shape)
    return [CostInput(_BINARY.get(op, "Mul"), {}, [x, t("other", (rows, cols))], [y])]


def table_kernels(columns: dict[str, list], use_units: bool = True) -> TableKernels:
    """Kernels and devices of the priced rows of a table slice given as ``{column: values}``.

    With ``use_units`` each row's compute peak is that of its ``unit`` (BF16 tensor cores for a BF16
    GEMM); without, every row gets the FP32 CUDA-core peak, as the NeuSight-only model was trained."""
    n = len(columns["family"])
    names = list(columns)
    cache: dict[tuple, KernelSpec | None] = {}
    specs, index, gpus, units = [], [], [], []
    skipped: Counter[str] = Counter()
    for i in range(n):
        row = {name: columns[name][i] for name in names}
        if row["family"] not in PRICED_FAMILIES:
            skipped[f"family {row['family']} not priced by the model"] += 1
            continue
        key = tuple(row.get(f) for f in ("family", "op", "mode", "dtype", "quant", "batch", "m", "n", "k", "bias", "in_c", "in_h",
                                          "in_w", "out_c", "kernel_h", "kernel_w", "stride_h", "stride_w", "pad_h",
                                          "pad_w", "groups", "rows", "cols"))
        if key not in cache:
            nodes = row_nodes(row)
            cache[key] = None if nodes is None else describe_kernel(nodes)
        spec = cache[key]
        if spec is None:
            skipped[f"{row['family']} shape not pinned down"] += 1
            continue
        specs.append(spec)
        index.append(i)
        gpus.append(row["gpu"])
        units.append(row.get("unit") if use_units else None)
    devices = {g: resolve_device(g) for g in set(gpus)}
    return TableKernels(index=np.asarray(index, dtype=np.int64), kernels=KernelBatch.from_specs(specs),
                        devices=DeviceColumns.from_devices([devices[g] for g in gpus], units), skipped=dict(skipped))
