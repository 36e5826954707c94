"""Where the time goes, measured: the per-category split of a NeuSight end-to-end label.

Beside each eager label NeuSight keeps a CSV of per-FX-node latencies measured inside the
running model, for the embeddings, the *first* transformer layer and the head. Counting the
layer's nodes ``num_layer`` times rebuilds the forward pass by category (GEMM, softmax,
layer norm, elementwise, other; the transformers measured have no convolutions). That
checks the breakdown `lilou infer` prints, not only its total. The rebuilt total is
within about 10 % of the label on most GPUs (the A100's small BERT and GPT-2 runs are
1.2-1.5x over); compare shares where that matters.
"""
from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lilou.errors import MissingDataError
from lilou.latency.composition.fallback import depthwise
from lilou.latency.kernel_model.kernel import KernelSpec

CATEGORIES = ("gemm", "conv", "softmax", "layernorm", "elementwise", "other")  # NeuSight's e2e models have no conv

# A node of the first repeated block: `bert.encoder.layer.0.`, GPT-2 `transformer.h.0.`, OPT `decoder.layers.0.`.
_FIRST_LAYER = re.compile(r"\.(?:layer|layers|h|block)\.0[.']")
_GEMM_FUNCTIONS = re.compile(r"\b(?:matmul|addmm|bmm|baddbmm|linear|einsum)\b")
# Functions and methods (``add_``: in place) that launch one elementwise kernel. ``max``/``min`` appear as
# torch.max(scores, floor) in OPT's attention, an elementwise clamp, not a reduction.
_ELEMENTWISE_FUNCTIONS = re.compile(
    r"\b(?:add|iadd|mul|imul|truediv|sub|neg|pow|gelu|tanh|relu|silu|sigmoid|where|exp|sqrt|rsqrt|erf|"
    r"masked_fill|clamp|abs|div|max|min|maximum|minimum|lt|gt|le|ge|eq|ne)_?\b")
_LAYERNORM_MODULE = re.compile(r"norm|(?:^|\.)ln_|(?:^|\.)ln_f$")
_NON_GEMM_MODULE = re.compile(r"embed|(?:^|\.)wte$|(?:^|\.)wpe$|drop")
_ACTIVATION_MODULE = re.compile(r"(?:^|\.)(?:activation|act|act_fn|activation_fn)$")


def node_category(op: str, target: str) -> str | None:
    """Category of one FX node (``op`` and ``target`` columns); None for nodes that launch nothing."""
    target = target.lower()
    if op in ("placeholder", "get_attr", "output"):
        return None
    if op == "call_module":
        if _LAYERNORM_MODULE.search(target):
            return "layernorm"
        if _ACTIVATION_MODULE.search(target):
            return "elementwise"
        if _NON_GEMM_MODULE.search(target):
            return "other"
        return "gemm"  # the remaining modules of these models are Linear layers and the LM head
    if "softmax" in target:
        return "softmax"
    if "layer_norm" in target:
        return "layernorm"
    if _GEMM_FUNCTIONS.search(target):
        return "gemm"
    if _ELEMENTWISE_FUNCTIONS.search(target):
        return "elementwise"
    return "other"


def measured_breakdown(node_csv: Path, layers: int) -> dict[str, float]:
    """ms per category of the whole forward pass, the first layer's nodes counted ``layers`` times."""
    totals = dict.fromkeys(CATEGORIES, 0.0)
    try:
        with open(node_csv, newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                category = node_category(row["op"], row["target"])
                if category is None:
                    continue
                repeats = layers if _FIRST_LAYER.search(f".{row['target']}.") or _FIRST_LAYER.search(row["meta"]) else 1
                totals[category] += float(row["latency"]) * repeats
    except (OSError, KeyError, ValueError) as error:
        raise MissingDataError(f"cannot read the per-node latencies {node_csv}: {error}") from error
    return totals


def kernel_category(spec: KernelSpec, fallback: bool) -> str:
    """Category of one predicted kernel; fallback kernels (gathers, copies, ...) count as other, except
    depthwise convolutions, which stay convolutions."""
    if fallback and not depthwise(spec):
        return "other"
    return spec.family if spec.family in CATEGORIES else "other"


def predicted_breakdown(specs: Sequence[KernelSpec], fallback: np.ndarray, kernel_ms: np.ndarray) -> dict[str, float]:
    """ms per category: the sum of each kernel's share of the predicted total."""
    totals = dict.fromkeys(CATEGORIES, 0.0)
    for spec, is_fallback, ms in zip(specs, fallback, kernel_ms):
        totals[kernel_category(spec, bool(is_fallback))] += float(ms)
    return totals
