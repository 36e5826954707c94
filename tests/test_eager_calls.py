"""Eager aten calls that launch more kernels than their group describes (lilou/latency/composition/eager_calls.py):
a convolution with a bias that cuDNN runs adds it in a second kernel (``output.add_(reshape_bias(...))`` in
aten/src/ATen/native/Convolution.cpp), and ``native_group_norm`` on CUDA launches its row moments, its fused
per-channel parameters and its element-wise pass (aten/src/ATen/native/cuda/group_norm_kernel.cu). Only the eager
backend's kernels change; the kernel groups (``lilou fuse``) do not."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from lilou.fusion.partition import Partition
from lilou.fusion.predict import predict_partition
from lilou.graph import build_graph
from lilou.graph.costs import TensorInfo
from lilou.graph.dag import load_graph
from lilou.latency.composition.eager_calls import (BIAS_ADD, CONTIGUOUS_COPY, GROUP_NORM_APPLY, GROUP_NORM_MOMENTS,
                                                   GROUP_NORM_PARAMETERS, INSTANCE_NORM_APPLY, INSTANCE_NORM_INVSTD,
                                                   INSTANCE_NORM_REPEAT, INSTANCE_NORM_STATISTICS,
                                                   NONZERO_COORDINATES, NONZERO_COUNT,
                                                   NONZERO_COUNT_TO_HOST, NONZERO_SELECT, NONZERO_SELECT_INIT,
                                                   runs_in_cudnn)
from lilou.latency.composition.end_to_end import describe_kernels
from lilou.latency.composition.overhead import queue_shares
from tests.onnx_builders import ints, make_model, tensor, weight

REPO = Path(__file__).resolve().parents[1]
UNET = REPO / "tests" / "data" / "diffusion" / "unet.onnx"
#: Exports of three eager calls (scripts/make_eager_call_fixtures.py), by TorchScript and by the dynamo exporter.
CALLS = REPO / "tests" / "data" / "eager_calls"


@pytest.fixture(scope="module")
def unet():
    graph = load_graph(UNET)
    return graph, predict_partition(graph, "eager")


def test_a_unet_launches_its_bias_adds_and_group_norm_passes(unet) -> None:
    """diffusers' UNet (TorchScript export): 33 convolutions, each with a bias of its own, 21 group norms and 4
    transformer blocks, each reading ``permute(0, 2, 3, 1).reshape(b, h * w, c)`` (a view, not contiguous) into its
    first layer norm. Its 273 kernel groups are 352 eager kernels: a bias add after each convolution, three kernels
    per group norm, a copy before each of those 4 layer norms. Each cross-attention's key, split into heads
    (``reshape``, ``permute``, ``reshape``: the last copies), is a copy kernel before its ``bmm`` (the version-6
    fusion model joined the copy to the ``bmm``: 269 groups, 348 kernels; the eager replay alone splits them too)."""
    graph, partition = unet
    kernels = describe_kernels(graph, partition)
    assert len(partition.kernels) == 273
    assert Counter(spec.role for spec in kernels.specs) == {"": 252, BIAS_ADD: 33, GROUP_NORM_MOMENTS: 21,
                                                             GROUP_NORM_PARAMETERS: 21, GROUP_NORM_APPLY: 21,
                                                             CONTIGUOUS_COPY: 4}
    dag = graph.dag
    for i, spec in enumerate(kernels.specs):
        if spec.role == BIAS_ADD:  # right after its convolution, listing its node: reads the output and the bias
            assert kernels.nodes[i] == kernels.nodes[i - 1] and kernels.specs[i - 1].family == "conv"
            conv = next(dag.nodes[n] for n in kernels.nodes[i] if dag.nodes[n]["op"] in ("Conv", "ConvTranspose"))
            out, bias = conv["outputs"][0], conv["inputs"][2]
            assert (spec.family, spec.bytes_read, spec.bytes_written) == ("elementwise", out.nbytes + bias.nbytes,
                                                                          out.nbytes)
        if spec.role == GROUP_NORM_MOMENTS:  # X read once, a mean and a 1/std per row of N x groups written
            following = [s.role for s in kernels.specs[i + 1:i + 3]]
            assert following == [GROUP_NORM_PARAMETERS, GROUP_NORM_APPLY]
            assert kernels.nodes[i] == kernels.nodes[i + 1] == kernels.nodes[i + 2]
            assert spec.family == "layernorm" and spec.bytes_written == 2 * spec.rows * 4
            assert spec.bytes_read == spec.rows * spec.cols * 4
        if spec.role == CONTIGUOUS_COPY:  # right before its layer norm: reads and writes the norm's input
            norm = next(dag.nodes[n] for n in kernels.nodes[i] if dag.nodes[n]["op"] == "LayerNormalization")
            assert kernels.nodes[i] == kernels.nodes[i + 1] and kernels.specs[i + 1].family == "layernorm"
            assert spec.bytes_read == spec.bytes_written == norm["inputs"][0].nbytes
            assert norm["inputs"][0].shape in ((2, 256, 64), (2, 64, 128))


def test_other_backends_keep_one_kernel_per_group(unet) -> None:
    graph, partition = unet
    tvm = describe_kernels(graph, Partition(backend="tvm", groups=partition.groups))
    assert len(tvm) == 273 and not any(spec.role for spec in tvm.specs)


def test_the_dynamo_exporters_zero_bias_is_no_bias() -> None:
    """examples/resnet18.onnx (dynamo, unoptimised): every convolution reads ``Expand(CastLike(0), ...)``, the bias
    torchlib builds for a convolution without one; its batch norms are their own nodes. No bias add."""
    graph = load_graph(REPO / "examples" / "resnet18.onnx")
    partition = predict_partition(graph, "eager")
    kernels = describe_kernels(graph, partition)
    assert len(kernels) == len(partition.kernels) == 68
    assert not any(spec.role for spec in kernels.specs)


def _info(name, shape, dtype="float32"):
    return TensorInfo(name, tuple(shape), dtype, 2 if dtype == "float16" else 4)


def test_depthwise_convolutions_outside_cudnn_take_their_bias_inside() -> None:
    """``_select_conv_backend``: a depthwise FP32 convolution runs in ``_conv_depthwise2d`` (bias inside); an FP16 one
    goes to cuDNN (then the add) where ``check_cudnn_depthwise_workload_with_filter`` says so."""
    x, w = _info("x", (1, 64, 56, 56)), _info("w", (64, 1, 3, 3))
    assert not runs_in_cudnn("Conv", {"group": 64}, x, w)
    assert runs_in_cudnn("Conv", {"group": 1}, x, _info("w", (64, 64, 3, 3)))
    assert runs_in_cudnn("Conv", {"group": 2}, x, _info("w", (64, 32, 3, 3)))  # grouped, not depthwise
    half_x, half_w = _info("x", (1, 64, 56, 56), "float16"), _info("w", (64, 1, 3, 3), "float16")
    assert runs_in_cudnn("Conv", {"group": 64}, half_x, half_w)  # 3x3, stride 1, width >= 7
    assert not runs_in_cudnn("Conv", {"group": 64, "strides": [3, 3]}, half_x, half_w)
    assert not runs_in_cudnn("Conv", {"group": 16}, _info("x", (1, 16, 56, 56), "float16"),
                             _info("w", (16, 1, 3, 3), "float16"))  # under 32 channels
    assert runs_in_cudnn("ConvTranspose", {"group": 64}, x, w)  # a transposed one is never depthwise


def _group_norm_model(affine: bool, spatial: tuple[int, ...]):
    """``nn.GroupNorm(2, 8)`` as TorchScript writes it, on (2, 8, *spatial)."""
    shape = [2, 8, *spatial]
    nodes = [helper.make_node("Reshape", ["x", "groups"], ["g"], name="to_groups"),
             helper.make_node("InstanceNormalization", ["g", "ones", "zeros"], ["n"], name="normalise"),
             helper.make_node("Reshape", ["n", "back"], ["r" if affine else "y"], name="from_groups")]
    if affine:
        nodes += [helper.make_node("Mul", ["r", "w"], ["m"], name="scale"),
                  helper.make_node("Add", ["m", "b"], ["y"], name="shift")]
    channels = [8] + [1] * len(spatial)
    return make_model(nodes, [tensor("x", shape)], [tensor("y", shape)],
                      [ints("groups", [2, 2, -1]), ints("back", shape), weight("ones", [2]), weight("zeros", [2]),
                       weight("w", channels), weight("b", channels)])


@pytest.mark.parametrize(("affine", "spatial", "roles"), [
    (True, (4, 4), [GROUP_NORM_MOMENTS, GROUP_NORM_PARAMETERS, GROUP_NORM_APPLY]),
    (False, (4, 4), [GROUP_NORM_MOMENTS, GROUP_NORM_APPLY]),  # no weight, no bias: the apply reads the moments
    (True, (1,), [GROUP_NORM_MOMENTS, GROUP_NORM_APPLY]),  # one element per channel: GroupNorm1dForward
])
def test_a_group_norm_is_its_moments_and_an_elementwise_pass(affine, spatial, roles) -> None:
    graph = build_graph(_group_norm_model(affine, spatial))
    partition = predict_partition(graph, "eager")
    assert len(partition.kernels) == 1
    kernels = describe_kernels(graph, partition)
    assert [spec.role for spec in kernels.specs] == roles
    elements = 16 * max(spatial[0] * spatial[-1], 1)
    moments, apply = kernels.specs[0], kernels.specs[-1]
    assert (moments.rows, moments.cols, moments.bytes_read, moments.bytes_written) == (4, elements // 4,
                                                                                       4 * elements, 4 * 4 * 2)
    assert apply.family == "elementwise" and apply.bytes_written == 4 * elements


def test_int8_convolutions_keep_their_bias_in_the_epilogue() -> None:
    """``--precision int8`` prices the runtimes that run INT8 convolutions (TensorRT, onnxruntime), which add the bias
    in the convolution's epilogue: no bias add; the group norms stay eager's."""
    from lilou.api import Predictor

    result = Predictor().predict(UNET, gpu="a10g", precision="int8")
    roles = Counter(kernel.role for kernel in result.kernels)
    assert roles[BIAS_ADD] == 0 and roles[GROUP_NORM_MOMENTS] == 21


@pytest.mark.parametrize("exporter", ["ts", "dynamo"])
def test_nonzero_counts_copies_the_count_to_the_host_and_selects(exporter) -> None:
    """``torch.nonzero(x > 0)`` of (8, 512): cub's count (one tile: 4096 elements), the count copied to the host (the
    host waits there), cub's select (init and sweep), the coordinates of a 2-D input. Sized at 4096 non-zeros."""
    graph = load_graph(CALLS / f"nonzero-{exporter}.onnx")
    kernels = describe_kernels(graph, predict_partition(graph, "eager"))
    roles = [spec.role for spec in kernels.specs if spec.role]
    assert roles == [NONZERO_COUNT, NONZERO_COUNT_TO_HOST, NONZERO_SELECT_INIT, NONZERO_SELECT, NONZERO_COORDINATES]
    first = [spec.role for spec in kernels.specs].index(NONZERO_COUNT)
    count, to_host, _, select, coordinates = kernels.specs[first:first + 5]
    assert (count.bytes_read, count.bytes_written) == (8 * 512, 4)  # a bool mask
    assert (to_host.bytes_read, to_host.bytes_written) == (4, 4)
    assert (select.bytes_read, select.bytes_written) == (8 * 512, 4096 * 8)
    assert (coordinates.bytes_read, coordinates.bytes_written) == (4096 * 8, 2 * 4096 * 8)
    assert kernels.host_waits.tolist() == [i == first + 1 for i in range(len(kernels))]
    tvm = describe_kernels(graph, Partition(backend="tvm", groups=predict_partition(graph, "eager").groups))
    assert not any(spec.role for spec in tvm.specs) and not tvm.host_waits.any()


def test_a_larger_count_takes_two_cub_passes() -> None:
    """Over one tile (4096 elements), ``DeviceReduce::Sum`` reduces each tile, then the tiles' counts."""
    model = make_model([helper.make_node("NonZero", ["x"], ["i"], name="nonzero")], [tensor("x", [4097])],
                       [tensor("i", [1, None], 7)])
    graph = build_graph(model)
    kernels = describe_kernels(graph, predict_partition(graph, "eager"))
    assert [spec.role for spec in kernels.specs] == [NONZERO_COUNT, NONZERO_COUNT, NONZERO_COUNT_TO_HOST,
                                                     NONZERO_SELECT_INIT, NONZERO_SELECT]  # 1-D: no coordinates
    assert [(s.bytes_read, s.bytes_written) for s in kernels.specs[:2]] == [(4097 * 4, 2 * 4), (2 * 4, 4)]


def test_a_nonzero_after_a_long_kernel_drains_the_queue_and_says_so() -> None:
    """A 64-channel 3x3 convolution on 384 x 384 lets the host run ahead; nonzero's copy to the host waits for it, so
    the kernel after the copy waits a launch gap instead of queueing behind the convolution. (On 256 x 256 it was
    0.096 ms of TF32 work on an A10G, over 3 launch gaps; since BF16 shares the FP16 tensor unit that TF32 stands in
    for, the retrained model prices it 0.075 ms, under 3 gaps: the larger input keeps the premise.)"""
    from lilou.api import Predictor

    shape = [1, 64, 384, 384]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Greater", ["c", "zero"], ["mask"], name="positive"),
             helper.make_node("NonZero", ["mask"], ["i"], name="nonzero"),
             helper.make_node("ReduceSum", ["i"], ["y"], name="count", keepdims=0)]
    model = make_model(nodes, [tensor("x", shape)], [tensor("y", [], 7)],
                       [weight("w", [64, 64, 3, 3]), weight("zero", [])])
    predictor = Predictor()
    result = predictor.predict(build_graph(model), gpu="a10g")
    assert sum(w.startswith("1 NonZero node(s) have a data-dependent output size") for w in result.warnings) == 1
    assert [k.role for k in result.kernels] == ["", "", NONZERO_COUNT, NONZERO_COUNT, NONZERO_COUNT_TO_HOST,
                                                NONZERO_SELECT_INIT, NONZERO_SELECT, NONZERO_COORDINATES, ""]
    gap = predictor.model.overhead.gap_ms
    gpu = np.array([k.work_ms for k in result.kernels])
    waits = np.arange(len(gpu)) == 4
    assert result.latency_ms == pytest.approx(queue_shares(gpu, gap, waits).sum(), abs=1e-3)
    # the host issued the count's kernels and the copy while the convolution ran; after the copy, the select's init
    # waits a whole gap (it would have queued behind the count), and the queue is that much longer
    assert gpu[0] > 3 * gap
    assert result.kernels[5].host_wait_ms == pytest.approx(gap, abs=1e-4)
    assert queue_shares(gpu, gap).sum() < result.latency_ms - 0.6 * gap
    assert not any("data-dependent" in w for w in predictor.predict(UNET, gpu="a10g").warnings)


@pytest.mark.parametrize("exporter", ["ts", "dynamo"])
def test_an_instance_norm_repeats_its_weights_and_runs_a_training_batch_norm(exporter) -> None:
    """The style block's affine ``InstanceNorm2d(8)`` on (1, 8, 64, 64) FP32: ``weight.repeat(1)`` and
    ``bias.repeat(1)``, then cuDNN's training batch norm (the group's own kernel). Its ``InstanceNorm2d(16)`` without
    weights, on (1, 16, 32, 32): the native batch norm's statistics, 1/std and element-wise pass."""
    graph = load_graph(CALLS / f"style-{exporter}.onnx")
    partition = predict_partition(graph, "eager")
    kernels = describe_kernels(graph, partition)
    dag = graph.dag
    norms = [i for i, nodes in enumerate(kernels.nodes)
             if any(dag.nodes[n]["op"] == "InstanceNormalization" for n in nodes)]
    assert [kernels.specs[i].role for i in norms] == [INSTANCE_NORM_REPEAT, INSTANCE_NORM_REPEAT, "",
                                                       INSTANCE_NORM_STATISTICS, INSTANCE_NORM_INVSTD,
                                                       INSTANCE_NORM_APPLY]
    repeat, _, cudnn, statistics, invstd, apply = (kernels.specs[i] for i in norms)
    assert (repeat.family, repeat.bytes_read, repeat.bytes_written) == ("elementwise", 8 * 4, 8 * 4)
    assert (cudnn.family, cudnn.bytes_written) == ("layernorm", 8 * 64 * 64 * 4)
    x = 16 * 32 * 32 * 4
    assert (statistics.family, statistics.rows, statistics.cols) == ("layernorm", 16, 32 * 32)
    assert (statistics.bytes_read, statistics.bytes_written) == (x, 2 * 16 * 4)
    assert (invstd.bytes_read, invstd.bytes_written) == (16 * 4, 16 * 4)
    assert (apply.family, apply.bytes_read, apply.bytes_written) == ("elementwise", x + 2 * 16 * 4, x)
    assert len(kernels) == len(partition.kernels) + 2 + 2 + 2  # two bias adds, two repeats, two more native passes
    tvm = describe_kernels(graph, Partition(backend="tvm", groups=partition.groups))
    assert len(tvm) == len(partition.kernels) and not any(spec.role for spec in tvm.specs)


def test_an_fp16_affine_instance_norm_runs_the_native_batch_norm() -> None:
    """``_select_batch_norm_backend`` keeps an FP16 input with FP16 weights off cuDNN: the affine norm's repeats, then
    the native statistics, 1/std and element-wise pass."""
    from lilou.api import Predictor

    result = Predictor().predict(CALLS / "style-ts.onnx", gpu="a10g", precision="fp16")
    roles = [kernel.role for kernel in result.kernels if kernel.role.startswith("instance norm")]
    native = [INSTANCE_NORM_STATISTICS, INSTANCE_NORM_INVSTD, INSTANCE_NORM_APPLY]
    assert roles == [INSTANCE_NORM_REPEAT, INSTANCE_NORM_REPEAT, *native, *native]


@pytest.mark.parametrize("exporter", ["ts", "dynamo"])
def test_a_layer_norm_of_a_permuted_view_copies_it_first(exporter) -> None:
    """ConvNeXt's block: ``permute(0, 2, 3, 1)`` of a (1, 16, 14, 14) activation into ``nn.LayerNorm(16)``.
    ``layer_norm_cuda`` takes ``input.expect_contiguous()``: a copy of the 14 x 14 x 16 values before the norm."""
    graph = load_graph(CALLS / f"convnext-{exporter}.onnx")
    partition = predict_partition(graph, "eager")
    kernels = describe_kernels(graph, partition)
    roles = [spec.role for spec in kernels.specs]
    assert roles.count(CONTIGUOUS_COPY) == 1 and len(kernels) == len(partition.kernels) + 1
    i = roles.index(CONTIGUOUS_COPY)
    copy, norm = kernels.specs[i], kernels.specs[i + 1]
    assert (copy.bytes_read, copy.bytes_written, norm.family) == (14 * 14 * 16 * 4, 14 * 14 * 16 * 4, "layernorm")
    assert kernels.nodes[i] == kernels.nodes[i + 1]
    tvm = describe_kernels(graph, Partition(backend="tvm", groups=partition.groups))
    assert not any(spec.role for spec in tvm.specs)


@pytest.mark.parametrize("name", ["ort/bert.onnx", "ort/gpt2.onnx"])
def test_layer_norms_of_contiguous_tensors_copy_nothing(name) -> None:
    """BERT's and GPT-2's layer norms read embeddings or a residual sum of contiguous tensors: no copy."""
    graph = load_graph(REPO / "tests" / "data" / name)
    kernels = describe_kernels(graph, predict_partition(graph, "eager"))
    assert any(spec.family == "layernorm" for spec in kernels.specs)
    assert CONTIGUOUS_COPY not in {spec.role for spec in kernels.specs}
