"""Kernel types: the class labels of the kernel-type head, read from measured kernel names.

NeuSight records, for every operator call, the main kernel launched (``Kernel Name``)
and often every kernel of the call (``Kernels``, lower-cased). Names carry the GPU
generation (``maxwell_``/``volta_``/``ampere_`` prefixes, cuDNN ``_v0``/``_v1``)
and a tile size, neither of which transfers to an unseen GPU. :func:`kernel_type`
folds them into a *family-level* type that does:

===========================  ==========================================================
type                         names (regex searched, case-insensitive, first match wins)
===========================  ==========================================================
gemm_sgemm                   cuBLAS SIMT sgemm: ``(maxwell|volta|turing|ampere)_sgemm_*``,
                             Pascal's ``sgemm_32x32x32_NN``, ``sgemm_128x128x8_NT_vec``
gemm_splitk                  a gemm call that also launched ``splitKreduce_kernel``
conv_implicit_gemm           ``*_scudnn_*`` (not winograd), ``implicit_convolve_sgemm``,
                             ``precomputed_convolve_sgemm``
conv_explicit_gemm           ``explicit_convolve_sgemm`` (im2col + GEMM)
conv_winograd                fused ``*_scudnn_winograd_*``
conv_winograd_nonfused       a conv call whose main kernel is a plain cuBLAS sgemm: the batched
                             GEMM between cuDNN's ``winogradForward{Data,Filter,Output}4x4``
conv_fft                     ``*_gcgemm_*`` (complex GEMM between ``fft2d_r2c``/``fft2d_c2r``)
elementwise_vectorized       ``vectorized_elementwise_kernel``
elementwise_generic          ``unrolled_elementwise_kernel``, ``elementwise_kernel``
layernorm                    ``layer_norm`` kernels (``vectorized_layer_norm_kernel``)
softmax_warp                 ``softmax_warp_forward`` (one warp per row, H <= 1024)
softmax_block                ``cunn_SoftMaxForward`` (one block per row)
other                        anything else
===========================  ==========================================================

Two types depend on the call, not the name alone: pass ``family`` and/or ``kernels``
(the call's ``Kernels``) to :func:`kernel_type`. Helper kernels of a call (cuDNN
offset/tile precomputation, FFT and winograd transforms, im2col, layout transforms,
``splitKreduce_kernel``) map to the type of the algorithm they serve.
:func:`tile_class` gives the GEMM/conv tile (``"128x64"``, ``"32x32_sliced1x4"``).
See ``docs/kernel_types.md`` for counts per GPU and how predictable types are from shapes.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from lilou.data.neusight import KernelTable

#: Class order of the kernel-type head (do not reorder: indices are labels).
KERNEL_TYPES: tuple[str, ...] = (
    "gemm_sgemm", "gemm_splitk",
    "conv_implicit_gemm", "conv_explicit_gemm", "conv_winograd", "conv_winograd_nonfused", "conv_fft",
    "elementwise_vectorized", "elementwise_generic", "layernorm", "softmax_warp", "softmax_block",
    "other",
)
_INDEX = {name: i for i, name in enumerate(KERNEL_TYPES)}

#: The types a kernel of each family can be (:data:`lilou.latency.kernel_model.kernel.FAMILIES`): the type head
#: predicts over every type, and its argmax named 34 of about 355 layer and group norms ``softmax_warp`` or
#: ``softmax_block`` (``type=softmax_warp, category=layernorm``). The data holds one type of layer norm, two of
#: softmax (warp for H <= 1024), the GEMM and convolution algorithms; a reduction's ``reduce_kernel`` names no rule
#: (``other``); a copy or gather (the memory family) is an elementwise kernel or ``other``.
FAMILY_TYPES: dict[str, tuple[str, ...]] = {
    "gemm": ("gemm_sgemm", "gemm_splitk"),
    "conv": ("conv_implicit_gemm", "conv_explicit_gemm", "conv_winograd", "conv_winograd_nonfused", "conv_fft"),
    "elementwise": ("elementwise_vectorized", "elementwise_generic"),
    "layernorm": ("layernorm",),
    "softmax": ("softmax_warp", "softmax_block"),
    "reduction": ("other",),
    "memory": ("elementwise_vectorized", "elementwise_generic", "other"),
}


def family_type_mask(families: Sequence[str]) -> np.ndarray:
    """bool [family, type]: whether a kernel of each of ``families`` can be of each of :data:`KERNEL_TYPES` (a
    family not in :data:`FAMILY_TYPES` can be any)."""
    mask = np.ones((len(families), len(KERNEL_TYPES)), dtype=bool)
    for row, family in enumerate(families):
        if family in FAMILY_TYPES:
            mask[row] = [kind in FAMILY_TYPES[family] for kind in KERNEL_TYPES]
    return mask

# Ordered: the first pattern found in the name decides (conv before the generic sgemm,
# layer norm and softmax before elementwise).
_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p, re.IGNORECASE), t) for p, t in (
    (r"splitkreduce", "gemm_splitk"),
    (r"gcgemm|fft2d_|flip_filter|region_transform", "conv_fft"),
    (r"winograd_nonfused|winogradforward(data|filter|output)", "conv_winograd_nonfused"),
    (r"winograd", "conv_winograd"),
    (r"explicit_convolve_sgemm|im2col", "conv_explicit_gemm"),
    ((r"implicit_convolve_sgemm|precomputed_convolve_sgemm|precompute_indices|scudnn|cask_cudnn"
     r"|nchwtonhwc|nhwctonchw"), "conv_implicit_gemm"),
    (r"\b(maxwell|volta|turing|ampere)_sgemm_|\bsgemm_\d+x\d+", "gemm_sgemm"),
    (r"softmax_warp_forward", "softmax_warp"),
    (r"softmax", "softmax_block"),
    (r"layer_?norm", "layernorm"),
    (r"vectorized_elementwise_kernel", "elementwise_vectorized"),
    (r"elementwise_kernel", "elementwise_generic"),
))
_TILE = re.compile(r"(?:sgemm|gcgemm|scudnn|scudnn_winograd)_(\d+x\d+)(?:x\d+)?(_sliced\d+x\d+)?", re.IGNORECASE)


@cache
def _name_type(name: str) -> str:
    for pattern, kind in _RULES:
        if pattern.search(name):
            return kind
    return "other"


def kernel_type(name: str, family: str | None = None, kernels: Sequence[str] = ()) -> str:
    """The kernel type of ``name``, refined by the call's op ``family`` and ``kernels`` when given.

    A plain cuBLAS sgemm is ``gemm_splitk`` when the call also launched a split-K
    reduction, and ``conv_winograd_nonfused`` in a conv call (every such call in the
    data launches the non-fused winograd transforms around it).
    """
    kind = _name_type(name)
    if kind == "gemm_sgemm":
        helpers = {_name_type(k) for k in kernels}
        if family == "conv" or "conv_winograd_nonfused" in helpers:
            return "conv_winograd_nonfused"
        if "gemm_splitk" in helpers:
            return "gemm_splitk"
    return kind


def type_index(name: str, family: str | None = None, kernels: Sequence[str] = ()) -> int:
    """The class index of :func:`kernel_type` in :data:`KERNEL_TYPES`."""
    return _INDEX[kernel_type(name, family, kernels)]


@cache
def tile_class(name: str) -> str | None:
    """The output tile of a cuBLAS/cuDNN GEMM-like kernel (``"128x64"``, ``"32x32_sliced1x4"``), else None.

    ``sgemm_128x128x8_NT_vec`` gives ``"128x128"`` (the third number is the K step).
    """
    match = _TILE.search(name)
    return (match.group(1) + (match.group(2) or "")).lower() if match else None


def table_types(table: KernelTable) -> np.ndarray:
    """:func:`kernel_type` of every row of a :class:`~lilou.data.neusight.KernelTable` (str array)."""
    memo: dict[tuple[str, str, tuple[str, ...]], str] = {}
    out = []
    for name, family, kernels in zip(table.kernel_name, table.family, table.kernels):
        key = (name, str(family), kernels)
        kind = memo.get(key)
        if kind is None:
            kind = memo[key] = kernel_type(name, str(family), kernels)
        out.append(kind)
    return np.array(out, dtype=f"U{max(map(len, KERNEL_TYPES))}")
