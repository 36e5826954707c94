"""Exact FLOP and byte counts on small hand-built graphs (multiply-add = 2 FLOPs)."""
from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from lilou.graph import build_graph
from tests.onnx_builders import ints, make_model, tensor, weight


def single_node_graph(node, inputs, outputs, initializers=()):
    return build_graph(make_model([node], inputs, outputs, initializers))


def only_node(graph):
    (name,) = graph.dag.nodes
    return graph.dag.nodes[name]


def test_conv_counts_macs_twice_plus_bias():
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])
    graph = single_node_graph(node, [tensor("x", [2, 16, 32, 32])], [tensor("y", None)],
                              [weight("w", [32, 16, 3, 3]), weight("b", [32])])
    data = only_node(graph)
    assert data["outputs"][0].shape == (2, 32, 16, 16)
    out_elements = 2 * 32 * 16 * 16
    assert data["flops"] == 2 * out_elements * 16 * 9 + out_elements
    assert data["bytes_read"] == 4 * (2 * 16 * 32 * 32 + 32 * 16 * 9 + 32)
    assert data["bytes_written"] == 4 * out_elements


def test_grouped_conv_uses_channels_per_group():
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=8, pads=[1, 1, 1, 1])
    graph = single_node_graph(node, [tensor("x", [1, 8, 10, 10])], [tensor("y", None)],
                              [weight("w", [8, 1, 3, 3])])
    assert only_node(graph)["flops"] == 2 * (8 * 10 * 10) * 9


def test_conv_transpose_scatters_each_input_element():
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])
    graph = single_node_graph(node, [tensor("x", [1, 4, 5, 5])], [tensor("y", None)],
                              [weight("w", [4, 6, 2, 2])])
    data = only_node(graph)
    assert data["outputs"][0].shape == (1, 6, 10, 10)
    assert data["flops"] == 2 * (4 * 5 * 5) * (6 * 2 * 2)


def test_batched_matmul_broadcasts_batch_dims():
    node = helper.make_node("MatMul", ["a", "b"], ["c"])
    graph = single_node_graph(node, [tensor("a", [3, 4, 8, 16]), tensor("b", [4, 16, 5])],
                              [tensor("c", None)])
    data = only_node(graph)
    assert data["outputs"][0].shape == (3, 4, 8, 5)
    assert data["flops"] == 2 * (3 * 4 * 8 * 5) * 16


def test_gemm_with_transposed_a_and_bias():
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1)
    graph = single_node_graph(node, [tensor("a", [64, 10])], [tensor("y", None)],
                              [weight("b", [30, 64]), weight("c", [30])])
    data = only_node(graph)
    assert data["outputs"][0].shape == (10, 30)
    assert data["flops"] == 2 * 10 * 30 * 64 + 10 * 30


@pytest.mark.parametrize("op,per_element", [("Add", 1), ("Relu", 1), ("Sigmoid", 4), ("Gelu", 8), ("Erf", 1)])
def test_elementwise_per_output_element(op, per_element):
    inputs = ["x", "x"] if op == "Add" else ["x"]
    node = helper.make_node(op, inputs, ["y"])
    graph = single_node_graph(node, [tensor("x", [4, 100])], [tensor("y", None)])
    assert only_node(graph)["flops"] == per_element * 400


def test_softmax_layernorm_batchnorm():
    x = tensor("x", [2, 3, 8])
    softmax = only_node(single_node_graph(helper.make_node("Softmax", ["x"], ["y"]), [x], [tensor("y", None)]))
    assert softmax["flops"] == 5 * 48
    norm = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)
    layer_norm = only_node(single_node_graph(norm, [x], [tensor("y", None)], [weight("g", [8]), weight("b", [8])]))
    assert layer_norm["flops"] == 7 * 48
    bn = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])
    batch_norm = only_node(single_node_graph(bn, [x], [tensor("y", None)],
                                             [weight(n, [3]) for n in ("s", "b", "m", "v")]))
    assert batch_norm["flops"] == 2 * 48


def test_training_mode_batchnorm_reads_its_input_twice():
    """With ``training_mode=1`` the batch's own mean and variance are computed first (one pass over X), then X is
    normalised (a second pass); the three outputs are Y and the updated running statistics."""
    x = tensor("x", [2, 3, 8])
    bn = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1)
    graph = single_node_graph(bn, [x], [tensor("y", None), tensor("rm", None), tensor("rv", None)],
                              [weight(n, [3]) for n in ("s", "b", "m", "v")])
    node = only_node(graph)
    assert node["flops"] == 7 * 48
    assert node["bytes_read"] == 2 * 48 * 4 + 4 * 3 * 4
    assert node["bytes_written"] == 48 * 4 + 2 * 3 * 4
    assert any(w.startswith("1 BatchNormalization node(s) run in training mode") for w in graph.warnings)


def test_pooling_and_reductions():
    x = tensor("x", [1, 4, 8, 8])
    pool = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    assert only_node(single_node_graph(pool, [x], [tensor("y", None)]))["flops"] == (4 * 4 * 4) * 4
    gap = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    assert only_node(single_node_graph(gap, [x], [tensor("y", None)]))["flops"] == 256
    mean = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)
    data = only_node(single_node_graph(mean, [x], [tensor("y", None)], [ints("axes", [2, 3])]))
    assert data["outputs"][0].shape == (1, 4)
    assert data["flops"] == 256 + 4


def test_resize_linear_and_nearest():
    x = tensor("x", [1, 2, 4, 4])
    for mode, expected in (("nearest", 0), ("linear", 2 * 4 * (2 * 8 * 8))):
        node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode)
        data = only_node(single_node_graph(node, [x], [tensor("y", None)], [ints("sizes", [1, 2, 8, 8])]))
        assert data["outputs"][0].shape == (1, 2, 8, 8)
        assert data["flops"] == expected


@pytest.mark.parametrize(("mode", "opset"), [("bilinear", 16), ("nearest", 16), ("bicubic", 16), ("linear", 20)])
def test_grid_sample_weighs_its_points(mode, opset):
    """GridSample had no cost formula: 0 FLOPs, with a warning, and its whole input read. Per output location
    (2 x 8 x 8 = 128) its coordinate: per axis 4 FLOPs to unnormalise and 1 to round (nearest), 3 for the floor and
    fractions plus a multiply a point's weight (linear), about 20 for the cubic coefficients; per output element
    (3 channels: 384) a multiply-add per point weighed. Bytes: the grid, the points gathered (at most the input)
    and the output."""
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, align_corners=0)
    graph = build_graph(make_model([node], [tensor("x", [2, 3, 32, 32]), tensor("grid", [2, 8, 8, 2])],
                                   [tensor("y", None)], opset=opset))
    data = only_node(graph)
    assert data["outputs"][0].shape == (2, 3, 8, 8)
    locations, elements = 2 * 8 * 8, 2 * 3 * 8 * 8
    flops, points = {"nearest": (5 * 2 * locations, 1),
                     "bilinear": ((7 * 2 + 4) * locations + 2 * 4 * elements, 4),
                     "linear": ((7 * 2 + 4) * locations + 2 * 4 * elements, 4),
                     "bicubic": (25 * 2 * locations + 2 * 16 * elements, 16)}[mode]
    assert data["flops"] == flops
    assert flops == {"nearest": 1280, "bilinear": 5376, "linear": 5376, "bicubic": 18688}[mode]
    assert data["bytes_read"] == 4 * (2 * 8 * 8 * 2) + 4 * min(2 * 3 * 32 * 32, points * elements)
    assert data["bytes_written"] == 4 * elements
    assert not any("GridSample" in w for w in graph.warnings)


def test_grid_sample_upsampling_reads_its_input_once():
    """A grid that samples more points than the input holds reads each input element once (the cache serves the
    neighbours): 4 x 64 x 64 bilinear outputs of a 1 x 4 x 16 x 16 input gather 4 points each, capped at 1,024."""
    node = helper.make_node("GridSample", ["x", "grid"], ["y"])
    data = only_node(build_graph(make_model([node], [tensor("x", [1, 4, 16, 16]), tensor("grid", [1, 64, 64, 2])],
                                            [tensor("y", None)], opset=16)))
    assert data["bytes_read"] == 4 * (64 * 64 * 2) + 4 * (4 * 16 * 16)
    assert data["flops"] == 18 * 64 * 64 + 8 * 4 * 64 * 64


def test_data_movement_and_views():
    concat = helper.make_node("Concat", ["a", "b"], ["c"], axis=1)
    data = only_node(single_node_graph(concat, [tensor("a", [2, 3]), tensor("b", [2, 5])], [tensor("c", None)]))
    assert (data["flops"], data["bytes_read"], data["bytes_written"]) == (0, 4 * 16, 4 * 16)
    reshape = helper.make_node("Reshape", ["a", "shape"], ["c"])
    data = only_node(single_node_graph(reshape, [tensor("a", [2, 3])], [tensor("c", None)], [ints("shape", [3, 2])]))
    assert data["outputs"][0].shape == (3, 2)
    assert (data["flops"], data["bytes_read"], data["bytes_written"]) == (0, 0, 0)


def test_gather_reads_selected_rows_not_whole_table():
    node = helper.make_node("Gather", ["table", "ids"], ["rows"])
    graph = single_node_graph(node, [tensor("ids", [2, 7], TensorProto.INT64)], [tensor("rows", None)],
                              [weight("table", [30000, 64])])
    data = only_node(graph)
    assert data["outputs"][0].shape == (2, 7, 64)
    assert data["bytes_written"] == 4 * 2 * 7 * 64
    assert data["bytes_read"] == 4 * 2 * 7 * 64 + 8 * 14


def test_shape_subgraph_is_constant_and_left_out_of_totals():
    nodes = [
        helper.make_node("Shape", ["w"], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["zeros"]),
        helper.make_node("CastLike", ["zeros", "x"], ["zeros_like"]),
        helper.make_node("Add", ["x", "zeros_like"], ["y"]),
    ]
    graph = build_graph(make_model(nodes, [tensor("x", [5])], [tensor("y", None)], [weight("w", [5])]))
    constant = {n: d["constant"] for n, d in graph.dag.nodes(data=True)}
    assert [constant[n] for n in graph.nodes_in_order()] == [True, True, True, False]
    assert graph.totals() == {"nodes": 1, "flops": 5, "bytes": 4 * 15}


def test_unsupported_op_is_reported_by_name():
    node = helper.make_node("MyFancyOp", ["x"], ["y"], domain="com.example")
    model = make_model([node], [tensor("x", [3])], [tensor("y", [3])])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    graph = build_graph(model)
    assert graph.unsupported_ops == ["MyFancyOp"]
    assert any("MyFancyOp" in w for w in graph.warnings)


def test_losses_have_cost_formulas():
    """Cross-entropy is a log-softmax over the classes (axis 1) and a pick of each target's entry; the negative
    log-likelihood reads one entry per target, not the whole input."""
    scores, target = tensor("x", [32, 10]), tensor("t", [32], TensorProto.INT64)
    loss = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"], reduction="mean", name="ce")
    graph = single_node_graph(loss, [scores, target], [tensor("y", None)])
    # written as the ONNX function's two ops, eager's two kernels: the log-softmax writes the log-probabilities
    assert [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()] == ["LogSoftmax", "NegativeLogLikelihoodLoss"]
    log_softmax, picked = (graph.dag.nodes[n] for n in graph.runtime_nodes())
    assert (log_softmax["bytes_read"], log_softmax["bytes_written"]) == (4 * 320, 4 * 320)
    assert (picked["flops"], picked["bytes_read"], picked["bytes_written"]) == (2 * 32, 4 * 32 + 8 * 32, 4)
    nll = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], reduction="mean")
    graph = single_node_graph(nll, [scores, target], [tensor("y", None)])
    node = only_node(graph)
    assert (node["flops"], node["bytes_read"], node["bytes_written"]) == (2 * 32, 4 * 32 + 8 * 32, 4)
    assert graph.unsupported_ops == []


def test_cross_entropy_kernel_is_priced_as_the_log_softmax_eager_runs():
    """The softmax model learned kernels that write what they read; eager's cross-entropy writes the
    log-probabilities, so the kernel's writes are those of its (N, C) scores."""
    from lilou.latency.kernel_model.kernel import describe_graph_kernel

    loss = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"], name="loss")
    graph = single_node_graph(loss, [tensor("x", [4096, 1000]), tensor("t", [4096], TensorProto.INT64)],
                              [tensor("y", None)])
    spec = describe_graph_kernel(graph, ["loss/log_softmax"])  # the nll_loss after it is a kernel of its own
    assert (spec.family, spec.rows, spec.cols) == ("softmax", 4096, 1000)
    assert (spec.bytes_written, spec.out_elements) == (4 * 4096 * 1000, 4096 * 1000)


def test_values_read_only_for_their_shape_compute_nothing():
    """``a`` (Add) and ``b`` (Mul of ``a``) are read only by ``Shape`` (through ``b``) and ``CastLike``'s type
    input: no runtime computes them. ``c`` is read by the same ``Shape`` but is also a graph output, and ``d``
    is read by value: both run."""
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="a"),
             helper.make_node("Mul", ["a", "a"], ["b"], name="b"),
             helper.make_node("Shape", ["b"], ["shape"], name="shape"),
             helper.make_node("CastLike", ["x", "a"], ["cast"], name="cast"),
             helper.make_node("Relu", ["x"], ["c"], name="c"),
             helper.make_node("Shape", ["c"], ["shape_c"], name="shape_c"),
             helper.make_node("Expand", ["cast", "shape"], ["e"], name="e"),
             helper.make_node("Neg", ["x"], ["d"], name="d"),
             helper.make_node("Reshape", ["d", "shape_c"], ["y"], name="y")]
    graph = build_graph(make_model(nodes, [tensor("x", [4, 8])],
                                   [tensor("y", None), tensor("c", None), tensor("e", None)]))
    data = graph.dag.nodes
    assert [n for n in ("a", "b") if data[n].get("shape_only")] == ["a", "b"]
    assert graph.runtime_nodes() == ["cast", "c", "e", "d", "y"]
    assert not any(data[n].get("shape_only") for n in ("cast", "c", "e", "d", "y"))


def test_ops_pytorch_programs_export_beyond_the_common_ones_have_cost_formulas():
    """torch.asin / sinh / bitwise_and, Hardshrink (ONNX Shrink), cumprod, topk and Hardmax: priced, not sent to the
    memory-bound fallback as unknown ops."""
    x = tensor("x", [4, 1000])
    for op, flops_per_element in (("Asin", 1), ("Sinh", 1), ("Atanh", 1), ("Shrink", 2)):
        node = only_node(single_node_graph(helper.make_node(op, ["x"], ["y"]), [x], [tensor("y", None)]))
        assert (node["flops"], node["bytes_read"], node["bytes_written"]) == (flops_per_element * 4000, 16000, 16000)
    ints_in = tensor("a", [4, 1000], TensorProto.INT32), tensor("b", [4, 1000], TensorProto.INT32)
    out = tensor("y", None, TensorProto.INT32)
    node = only_node(single_node_graph(helper.make_node("BitwiseAnd", ["a", "b"], ["y"]), ints_in, [out]))
    assert (node["flops"], node["bytes_read"], node["bytes_written"]) == (4000, 32000, 16000)
    cumprod = helper.make_node("CumProd", ["x", "axis"], ["y"])  # opset 26
    node = only_node(build_graph(make_model([cumprod], [x], [tensor("y", None)], [ints("axis", 1)], opset=26)))
    assert node["flops"] == 4000 and node["bytes_written"] == 16000
    # top 5 of 1000 per row: log2(5 + 1) -> 3 selection passes; values (float) and indices (int64) written
    topk = helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=-1)
    graph = single_node_graph(topk, [x], [tensor("values", None), tensor("indices", None, TensorProto.INT64)],
                              [ints("k", [5])])
    node = only_node(graph)
    assert (node["flops"], node["bytes_written"]) == (3 * 4000, 4 * 20 + 8 * 20)
    hardmax = only_node(single_node_graph(helper.make_node("Hardmax", ["x"], ["y"]), [x], [tensor("y", None)]))
    assert hardmax["flops"] == 2 * 4000
    assert graph.unsupported_ops == []


@pytest.mark.parametrize(("equation", "shapes", "output", "flops"), [
    # what torch.utils.flop_counter counts for torch.einsum (pairwise contraction, left to right)
    ("...ij,...jk->...ik", [[2, 3, 32, 64], [2, 3, 64, 48]], [2, 3, 32, 48], 2 * 6 * 32 * 64 * 48),  # was 0
    ("bij,bjk->bik", [[4, 32, 64], [1, 64, 48]], [4, 32, 48], 2 * 4 * 32 * 64 * 48),  # a broadcast batch: was 1/4
    ("ij,jk,kl->il", [[32, 64], [64, 48], [48, 16]], [32, 16], 2 * 32 * 64 * 48 + 2 * 32 * 48 * 16),  # was 12.8x
    ("i,j->ij", [[32], [192]], [32, 192], 32 * 192),  # nothing summed: one multiply per output, not a multiply-add
    ("bhqd,bhkd->bhqk", [[2, 8, 128, 64], [2, 8, 128, 64]], [2, 8, 128, 128], 2 * 16 * 128 * 128 * 64),
    ("ij->i", [[3, 4]], [3], 12),  # a sum: one add per element
    ("ij->ji", [[3, 4]], [4, 3], 0),  # a permutation computes nothing
])
def test_einsum_counts_what_torch_counts(equation, shapes, output, flops):
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    graph = single_node_graph(node, [tensor(n, s) for n, s in zip(names, shapes)], [tensor("y", output)])
    assert only_node(graph)["flops"] == flops


def test_a_bias_of_zeros_written_by_the_exporter_is_no_bias():
    """torch.onnx.export(dynamo=True) writes Expand(CastLike(0, x), Shape(w)[:1]) as the bias of a bias-free
    convolution; eager PyTorch adds nothing. It was counted as an element-wise pass (+5.6 % on a depthwise conv)."""
    zero = [helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", TensorProto.FLOAT, [], [0.0])),
            helper.make_node("CastLike", ["zero", "x"], ["zero_x"]),
            helper.make_node("Expand", ["zero_x", "channels"], ["bias"]),
            helper.make_node("Conv", ["x", "w", "bias"], ["y"], name="conv", group=8, pads=[1, 1, 1, 1])]
    graph = build_graph(make_model(zero, [tensor("x", [1, 8, 10, 10])], [tensor("y", None)],
                                   [weight("w", [8, 1, 3, 3]), ints("channels", [8])]))
    assert graph.dag.nodes["conv"]["flops"] == 2 * (8 * 10 * 10) * 9  # the bias-free count
    real = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", group=8, pads=[1, 1, 1, 1])
    biased = build_graph(make_model([real], [tensor("x", [1, 8, 10, 10])], [tensor("y", None)],
                                    [weight("w", [8, 1, 3, 3]), weight("b", [8])]))
    assert biased.dag.nodes["conv"]["flops"] == 2 * (8 * 10 * 10) * 9 + 8 * 10 * 10  # a real bias still counts


def test_a_dot_product_counts_two_flops_per_element():
    """1-D . 1-D MatMul: a scalar output (shape ()), 2 * K FLOPs as eager's ``dot``; it was 0."""
    node = helper.make_node("MatMul", ["a", "b"], ["c"])
    data = only_node(single_node_graph(node, [tensor("a", [1024]), tensor("b", [1024])], [tensor("c", None)]))
    assert data["outputs"][0].shape == ()
    assert (data["flops"], data["bytes_read"], data["bytes_written"]) == (2 * 1024, 8192, 4)


def test_expand_and_tile_read_their_data_not_their_shape():
    """The int64 target shape of an Expand (the repeats of a Tile) is metadata, as a Slice's starts and ends are."""
    expand = helper.make_node("Expand", ["a", "shape"], ["c"])
    data = only_node(single_node_graph(expand, [tensor("a", [3, 1, 4])], [tensor("c", None)],
                                       [ints("shape", [2, 3, 5, 4])]))
    assert (data["bytes_read"], data["bytes_written"]) == (4 * 12, 4 * 120)
    tile = helper.make_node("Tile", ["a", "repeats"], ["c"])
    data = only_node(single_node_graph(tile, [tensor("a", [3, 1, 4])], [tensor("c", None)], [ints("repeats", [2, 1, 1])]))
    assert (data["bytes_read"], data["bytes_written"]) == (4 * 12, 4 * 24)


@pytest.mark.parametrize("op,per_element", [("Sum", 3), ("Max", 3), ("Min", 3), ("Mean", 4)])
def test_variadic_elementwise_ops_count_one_op_per_extra_input(op, per_element):
    """Four inputs: three adds (maxima, minima) per output element, and a Mean's scale; it was 1 whatever n."""
    node = helper.make_node(op, ["a", "b", "c", "d"], ["y"])
    graph = single_node_graph(node, [tensor(name, [4, 100]) for name in "abcd"], [tensor("y", None)])
    assert only_node(graph)["flops"] == per_element * 400


def test_the_fusion_features_read_the_costs_they_were_trained_on():
    """The cost fixes above leave the shipped fusion GNN's node features as they were (lilou.graph.features)."""
    import math

    from lilou.graph.features import node_scalars

    dot = only_node(single_node_graph(helper.make_node("MatMul", ["a", "b"], ["c"]),
                                      [tensor("a", [1024]), tensor("b", [1024])], [tensor("c", None)]))
    expand = only_node(single_node_graph(helper.make_node("Expand", ["a", "shape"], ["c"]), [tensor("a", [3, 1, 4])],
                                         [tensor("c", None)], [ints("shape", [2, 3, 5, 4])]))
    total = only_node(single_node_graph(helper.make_node("Sum", ["a", "b", "c", "d"], ["y"]),
                                        [tensor(name, [4, 100]) for name in "abcd"], [tensor("y", None)]))
    assert node_scalars(dot)[:2] == [0.0, math.log1p(8192)]
    assert node_scalars(expand)[:2] == [0.0, math.log1p(4 * 12 + 8 * 4)]
    assert node_scalars(total)[:2] == [math.log1p(400), math.log1p(4 * 1600)]
