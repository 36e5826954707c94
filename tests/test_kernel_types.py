"""Kernel-type taxonomy: real NeuSight kernel names of every family and GPU generation."""
from __future__ import annotations

import pytest

from lilou.latency.kernel_model.kernel_types import KERNEL_TYPES, kernel_type, tile_class, type_index

# Literal kernel names as they appear in NeuSight's ``Kernel Name`` column (long C++ names
# abbreviated after their template arguments: the rules only look at the start).
NAMES = [
    # cuBLAS SIMT sgemm: Pascal (maxwell_ kernels), Volta/Turing, Ampere, Pascal's sgemm_MxNxK
    ("maxwell_sgemm_128x64_nn", "gemm_sgemm"),           # P4, P100 bmm
    ("maxwell_sgemm_32x128_tn", "gemm_sgemm"),           # P4, P100 linear
    ("volta_sgemm_64x64_nn", "gemm_sgemm"),              # V100, T4
    ("volta_sgemm_32x32_sliced1x4_tn", "gemm_sgemm"),
    ("ampere_sgemm_128x128_nn", "gemm_sgemm"),           # A100
    ("ampere_sgemm_64x32_sliced1x4_tn", "gemm_sgemm"),
    ("sgemm_32x32x32_NN", "gemm_sgemm"),                 # P4, P100
    ("sgemm_128x128x8_NT_vec", "gemm_sgemm"),            # P4 (test split)
    # cuDNN convolutions
    ("cudnn_infer_maxwell_scudnn_128x64_relu_small_nn_v1", "conv_implicit_gemm"),
    ("cudnn_infer_volta_scudnn_128x64_3dconv_fprop_small_nn_v1", "conv_implicit_gemm"),
    ("cudnn_infer_volta_scudnn_128x32_sliced1x4_ldg4_relu_exp_small_nhwc_tn_v1", "conv_implicit_gemm"),
    ("cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "conv_implicit_gemm"),
    ("void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int)",
     "conv_implicit_gemm"),
    ("void precomputed_convolve_sgemm<float, 1024, 5, 5, 4, 3, 3, 1, false>(int)", "conv_implicit_gemm"),
    ("void explicit_convolve_sgemm<float, int, 128, 5, 5, 3, 3, 3, 0, false>(int)", "conv_explicit_gemm"),
    ("cudnn_infer_maxwell_scudnn_winograd_128x128_ldg1_ldg4_mobile_relu_tile148t_nt_v0", "conv_winograd"),
    ("cudnn_infer_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "conv_winograd"),
    ("cudnn_infer_ampere_scudnn_winograd_128x128_ldg1_ldg4_relu_tile442t_nt_v1", "conv_winograd"),
    ("maxwell_gcgemm_64x64_nt", "conv_fft"),
    ("volta_gcgemm_64x32_nt", "conv_fft"),
    ("ampere_gcgemm_32x32_tn", "conv_fft"),
    # PyTorch kernels (identical on every GPU)
    (("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3> >(int)"), "elementwise_vectorized"),
    (("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
     "at::native::GeluType)::{lambda()#2}"), "elementwise_vectorized"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::direct_copy_kernel_cuda",
     "elementwise_generic"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float)", "layernorm"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float*)",
     "softmax_warp"),
    (("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)"), "softmax_block"),
    # helpers of a call (the Kernels column is lower-cased) map to the algorithm they serve
    ("void splitkreduce_kernel<32, 16, int, float, float, float, float, true, true, false>(", "gemm_splitk"),
    ("void cudnn::winograd_nonfused::winogradforwarddata4x4<float, float>(", "conv_winograd_nonfused"),
    ("void cudnn::winograd::generatewinogradtileskernel<0, float, float>(", "conv_winograd"),
    ("void fft2d_r2c_32x32<float, false, 0u, false>(float2*)", "conv_fft"),
    ("void cudnn::cnn::im2col4d_kernel<float, long>(", "conv_explicit_gemm"),
    ("void cask_cudnn_infer::computeoffsetskernel<false, false>(", "conv_implicit_gemm"),
    ("some_unknown_kernel", "other"),
]


@pytest.mark.parametrize(("name", "expected"), NAMES)
def test_kernel_type_of_real_names(name: str, expected: str) -> None:
    assert kernel_type(name) == expected
    assert type_index(name) == KERNEL_TYPES.index(expected)


def test_names_are_case_insensitive() -> None:
    assert kernel_type("SGEMM_32X32X32_NN_VEC") == "gemm_sgemm"
    assert kernel_type("maxwell_sgemm_128x64_NN") == "gemm_sgemm"


def test_call_context_refines_plain_sgemm() -> None:
    winograd = ("void cudnn::winograd_nonfused::winogradforwardfilter4x4<float, float>(",
                "void cudnn::winograd_nonfused::winogradforwarddata4x4<float, float>(",
                "volta_sgemm_64x64_nn",
                "void cudnn::winograd_nonfused::winogradforwardoutput4x4<float, float>(")
    assert kernel_type("volta_sgemm_64x64_nn", "conv") == "conv_winograd_nonfused"
    assert kernel_type("volta_sgemm_64x64_nn", kernels=winograd) == "conv_winograd_nonfused"
    splitk = ("maxwell_sgemm_128x32_tn", "void splitkreduce_kernel<32, 16, int, float, float, float, float, true, true")
    assert kernel_type("maxwell_sgemm_128x32_tn", "gemm", splitk) == "gemm_splitk"
    assert kernel_type("maxwell_sgemm_128x32_tn", "gemm", ("maxwell_sgemm_128x32_tn",)) == "gemm_sgemm"
    assert type_index("ampere_sgemm_128x128_nn", "conv") == KERNEL_TYPES.index("conv_winograd_nonfused")
    # context never changes a non-sgemm kernel
    assert kernel_type("maxwell_gcgemm_64x64_nt", "conv", splitk) == "conv_fft"


def test_kernel_types_order() -> None:
    assert len(set(KERNEL_TYPES)) == len(KERNEL_TYPES) == 13
    assert KERNEL_TYPES[0] == "gemm_sgemm" and KERNEL_TYPES[-1] == "other"
    assert {expected for _, expected in NAMES} == set(KERNEL_TYPES)


@pytest.mark.parametrize(("name", "tile"), [
    ("maxwell_sgemm_128x64_nn", "128x64"),
    ("volta_sgemm_32x128_tn", "32x128"),
    ("ampere_sgemm_32x32_sliced1x4_tn", "32x32_sliced1x4"),
    ("volta_sgemm_128x32_sliced1x4_nn", "128x32_sliced1x4"),
    ("sgemm_128x128x8_NT_vec", "128x128"),
    ("sgemm_32x32x32_NN", "32x32"),
    ("ampere_gcgemm_64x32_nt", "64x32"),
    ("cudnn_infer_volta_scudnn_128x64_sliced1x2_ldg4_relu_exp_small_nhwc_tn_v1", "128x64_sliced1x2"),
    ("cudnn_infer_maxwell_scudnn_128x32_relu_small_nn_v1", "128x32"),
    ("cudnn_infer_ampere_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "128x128"),
    ("void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int)", None),
    ("void fft2d_r2c_32x32<float, false, 0u, false>(float2*)", None),
    ("void cudnn::winograd_nonfused::winogradforwarddata4x4<float, float>(", None),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float*)", None),
])
def test_tile_class(name: str, tile: str | None) -> None:
    assert tile_class(name) == tile


_FAMILY_PREFIX = {"gemm": "gemm_", "conv": "conv_", "elementwise": "elementwise_",
                  "layernorm": "layernorm", "softmax": "softmax_"}


@pytest.mark.parametrize("split", ["train", "test"])
def test_every_measured_name_is_typed(datasets_dir, split: str) -> None:
    """Every main and helper kernel of the data has a type, and main kernels match their op family."""
    from lilou.data.neusight import load_kernels
    from lilou.latency.kernel_model.kernel_types import table_types

    table = load_kernels(split, data_dir=datasets_dir)
    assert len(table) > 0
    names = set(table.kernel_name) | {k for kernels in set(table.kernels) for k in kernels}
    untyped = sorted(name for name in names if kernel_type(name) == "other")
    assert not untyped, untyped[:5]
    types = table_types(table)
    assert len(types) == len(table)
    for family, prefix in _FAMILY_PREFIX.items():
        wrong = {str(t) for t in types[table.family == family] if not str(t).startswith(prefix)}
        assert not wrong, (family, wrong)
    if split == "train":  # call context: non-fused winograd and split-K appear only through it
        assert {"conv_winograd_nonfused", "gemm_splitk"} <= set(types.tolist())
