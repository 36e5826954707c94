"""Which operators `lilou profile ops` times, at which shapes and precisions.

The ops and their shape conventions are NeuSight's (``linear``, ``bmm``, ``conv``, ``add`` ... ``ln``,
``softmax``), so that a profiled row and a NeuSight row of the same call are the same kernel to the model, and the
shapes are those where the measurements are thin: tiny calls (the launch floor of the host the profile runs on),
the GEMM and convolution sizes of real models (BERT, GPT, Llama projections; ResNet, MobileNet layers, depthwise
ones included, which no public source measured), and the memory-bound families across sizes that straddle the L2.
``quick`` is a subset that runs in a few minutes on any GPU (a MIG slice included); ``full`` adds sizes.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

FAMILIES = ("gemm", "bmm", "conv", "elementwise", "softmax", "norm")
#: Profiled precisions: ``fp32`` is strict FP32 (TF32 off for matmuls and convolutions), ``tf32`` lets both use it.
DTYPES = ("fp32", "tf32", "fp16", "bf16")
SIZES = ("quick", "full")
#: Elementwise ops (NeuSight's names): two tensors, a tensor and a Python scalar (``addu``, ``mulu``), or one tensor.
ELEMENTWISE_OPS = ("add", "mul", "addu", "mulu", "relu", "gelu", "tanh")
#: The families whose math runs on the unit of the dtype (the others are memory-bound at every size here).
MATH_FAMILIES = ("gemm", "bmm", "conv")


@dataclass(frozen=True)
class OpCase:
    """One operator call to time: its kernel-table family, NeuSight op name, precision and shape fields."""

    family: str
    op: str
    dtype: str
    shape: dict[str, int] = field(hash=False)

    def key(self) -> tuple:
        return (self.family, self.op, self.dtype, tuple(sorted(self.shape.items())))

    def elements(self) -> int:
        """Elements of every tensor the call touches (inputs, weights and output): what it needs in memory."""
        s = self.shape
        if self.family in ("gemm", "bmm"):
            return s["batch"] * (s["m"] * s["k"] + s["k"] * s["n"] + s["m"] * s["n"])
        if self.family == "conv":
            out_h = (s["in_h"] + 2 * s["pad_h"] - s["kernel_h"]) // s["stride_h"] + 1
            out_w = (s["in_w"] + 2 * s["pad_w"] - s["kernel_w"]) // s["stride_w"] + 1
            weight = s["out_c"] * (s["in_c"] // s["groups"]) * s["kernel_h"] * s["kernel_w"]
            return s["batch"] * (s["in_c"] * s["in_h"] * s["in_w"] + s["out_c"] * out_h * out_w) + weight
        operands = 2 if self.op in ("add", "mul") else 1
        return (operands + 1) * s["rows"] * s["cols"]


# ------------------------------------------------------------------------------------------ shapes

#: (m, k, n) of nn.Linear(k, n) on m rows: BERT-base/large and GPT-2 projections, Llama-7B/8B MLP and QKV.
_LINEAR = ((768, 768), (768, 3072), (3072, 768), (1024, 1024), (1024, 4096), (4096, 1024), (4096, 4096),
           (4096, 11008), (11008, 4096), (4096, 14336))
_LINEAR_ROWS = {"quick": (1, 16, 128, 512, 2048, 8192), "full": (1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)}
#: (batch x heads, m, n, k) of attention's two batched GEMMs: scores [s, d] x [d, s] and context [s, s] x [s, d].
_BMM_HEADS = {"quick": (12, 96), "full": (12, 48, 96, 192)}
_BMM_SEQ = {"quick": (128, 512, 2048), "full": (64, 128, 256, 512, 1024, 2048)}
_BMM_HEAD_DIM = (64, 128)
#: (in_c, in_hw, out_c, kernel, stride, pad, groups): ResNet-50 stem and stages, 1x1 bottlenecks, MobileNet's
#: depthwise 3x3 (groups = channels) and pointwise layers.
_CONV = (
    (3, 224, 64, 7, 2, 3, 1), (64, 56, 64, 3, 1, 1, 1), (64, 56, 256, 1, 1, 0, 1), (256, 56, 64, 1, 1, 0, 1),
    (128, 28, 128, 3, 1, 1, 1), (128, 56, 128, 3, 2, 1, 1), (256, 14, 256, 3, 1, 1, 1), (512, 7, 512, 3, 1, 1, 1),
    (1024, 14, 256, 1, 1, 0, 1), (32, 112, 32, 3, 1, 1, 32), (144, 56, 144, 3, 2, 1, 144), (192, 28, 192, 3, 1, 1, 192),
    (576, 14, 576, 3, 1, 1, 576), (960, 7, 960, 3, 1, 1, 960), (32, 112, 16, 1, 1, 0, 1), (96, 56, 24, 1, 1, 0, 1),
)
_CONV_BATCH = {"quick": (1, 8, 32), "full": (1, 2, 4, 8, 16, 32, 64)}
#: [rows, cols] of the memory-bound families: from one element (the launch floor) to 256 MB in FP32.
_VECTOR = {"quick": ((1, 1), (1, 1024), (64, 1024), (512, 4096), (4096, 4096), (8192, 8192)),
           "full": ((1, 1), (1, 1024), (16, 1024), (64, 1024), (256, 1024), (512, 4096), (1024, 4096), (2048, 4096),
                    (4096, 4096), (8192, 4096), (8192, 8192), (16384, 4096))}
#: [rows, cols] of softmax and layer norm: attention scores (cols = sequence) and hidden states (cols = width).
_ROWWISE = {"quick": ((1, 1024), (64, 1024), (512, 512), (4096, 1024), (4096, 4096), (8192, 768), (98304, 512)),
            "full": ((1, 1024), (16, 768), (64, 1024), (256, 2048), (512, 512), (1024, 1024), (4096, 1024),
                     (4096, 4096), (8192, 768), (8192, 4096), (24576, 128), (98304, 512))}


def _gemm_cases(dtype: str, size: str) -> list[OpCase]:
    return [OpCase("gemm", "linear", dtype, {"batch": 1, "m": m, "n": n, "k": k})
            for (k, n), m in itertools.product(_LINEAR, _LINEAR_ROWS[size])]


def _bmm_cases(dtype: str, size: str) -> list[OpCase]:
    cases = []
    for heads, seq, head_dim in itertools.product(_BMM_HEADS[size], _BMM_SEQ[size], _BMM_HEAD_DIM):
        cases.append(OpCase("bmm", "bmm", dtype, {"batch": heads, "m": seq, "n": seq, "k": head_dim}))  # scores
        cases.append(OpCase("bmm", "bmm", dtype, {"batch": heads, "m": seq, "n": head_dim, "k": seq}))  # context
    return cases


def _conv_cases(dtype: str, size: str) -> list[OpCase]:
    return [OpCase("conv", "conv", dtype, {
        "batch": batch, "in_c": c, "in_h": hw, "in_w": hw, "out_c": co, "kernel_h": kernel, "kernel_w": kernel,
        "stride_h": stride, "stride_w": stride, "pad_h": pad, "pad_w": pad, "groups": groups})
        for (c, hw, co, kernel, stride, pad, groups), batch in itertools.product(_CONV, _CONV_BATCH[size])]


def _vector_cases(family: str, dtype: str, size: str) -> list[OpCase]:
    if family == "elementwise":
        return [OpCase("elementwise", op, dtype, {"rows": rows, "cols": cols})
                for op, (rows, cols) in itertools.product(ELEMENTWISE_OPS, _VECTOR[size])]
    op = "ln" if family == "norm" else "softmax"
    return [OpCase(family, op, dtype, {"rows": rows, "cols": cols}) for rows, cols in _ROWWISE[size]]


def op_sweep(families: tuple[str, ...] = FAMILIES, dtypes: tuple[str, ...] = DTYPES, size: str = "quick") -> list[OpCase]:
    """Every case of the sweep, family by family. ``tf32`` applies to the math families only (memory-bound
    kernels run the same in FP32 either way); unknown names are a ValueError (the CLI checks them first)."""
    for name, given, known in (("family", families, FAMILIES), ("dtype", dtypes, DTYPES), ("size", (size,), SIZES)):
        unknown = [g for g in given if g not in known]
        if unknown:
            raise ValueError(f"unknown {name} {', '.join(unknown)}; known: {', '.join(known)}")
    cases = []
    for family, dtype in itertools.product(families, dtypes):
        if dtype == "tf32" and family not in MATH_FAMILIES:
            continue
        if family == "gemm":
            cases += _gemm_cases(dtype, size)
        elif family == "bmm":
            cases += _bmm_cases(dtype, size)
        elif family == "conv":
            cases += _conv_cases(dtype, size)
        else:
            cases += _vector_cases(family, dtype, size)
    # attention's two GEMMs coincide where the sequence is as long as the head dimension: time each call once
    return list({case.key(): case for case in cases}.values())
