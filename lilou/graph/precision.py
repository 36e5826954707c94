"""The precision a model computes in, read from its ONNX tensor types.

The precision of a model is that of its math-heavy nodes (MatMul, Gemm, Conv, ConvTranspose,
Einsum, attention): the element type of their first input, weighted by FLOPs. An FP16 or BF16
export is an FP16/BF16 model; a graph whose heavy nodes mix types is reported as mixed, with
its dominant precision.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # onnx is imported only when a graph is read
    from lilou.graph.dag import ModelGraph

#: ONNX/numpy element type names -> Lilou's precision names (those of the kernel table).
PRECISION_OF_DTYPE = {
    "float32": "fp32", "float64": "fp64", "float16": "fp16", "bfloat16": "bf16",
    "float8_e4m3fn": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2": "fp8", "float8_e5m2fnuz": "fp8",
    "int8": "int8", "uint8": "int8", "int4": "int4", "uint4": "int4", "float4_e2m1": "fp4",
}
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4", "fp4")
#: What a file's types can say beyond what --precision takes: FP64 (a ``.double()`` export) is read, priced on the
#: FP64 CUDA cores' peak (lilou.latency.composition.end_to_end.fp64_floor_ms), not asked for.
READ_PRECISIONS = (*PRECISIONS, "fp64")
MATH_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "MatMulInteger", "ConvInteger",
                      "QLinearMatMul", "QLinearConv", "Attention", "MultiHeadAttention"})


@dataclass(frozen=True)
class ModelPrecision:
    """What the math-heavy nodes of a graph compute in."""

    precision: str                 # the dominant one (by FLOPs); "fp32" for a graph without such nodes
    shares: dict[str, float]       # precision -> share (0..1) of the math-heavy FLOPs

    @property
    def mixed(self) -> bool:
        return sum(1 for share in self.shares.values() if share >= 0.01) > 1


def _math_reads(graph: ModelGraph) -> Iterator[tuple[dict, str]]:
    """(node data, the precision its first input reads) of every math-heavy node whose type Lilou knows."""
    for name in graph.runtime_nodes():
        data = graph.dag.nodes[name]
        if data["op"] not in MATH_OPS:
            continue
        first = next((t for t in data["inputs"] if t is not None), None)
        precision = PRECISION_OF_DTYPE.get(first.dtype) if first is not None else None
        if precision is not None:
            yield data, precision


def model_precision(graph: ModelGraph) -> ModelPrecision:
    """The FLOP-weighted precision of ``graph``'s math-heavy nodes."""
    flops: Counter[str] = Counter()
    for data, precision in _math_reads(graph):
        flops[precision] += max(int(data.get("flops") or 0), 1)
    total = sum(flops.values())
    if not total:
        return ModelPrecision("fp32", {})
    shares = {p: flops[p] / total for p in READ_PRECISIONS if flops[p]}
    return ModelPrecision(max(shares, key=shares.__getitem__), shares)


def math_op_precisions(graph: ModelGraph) -> dict[str, set[str]]:
    """Each precision the math-heavy nodes read -> the kernel families reading it ("conv", "gemm")."""
    read: dict[str, set[str]] = {}
    for data, precision in _math_reads(graph):
        read.setdefault(precision, set()).add("conv" if "Conv" in data["op"] else "gemm")
    return read
