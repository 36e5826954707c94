"""The eager view replay (a GNN feature) against the eager oracle, on hand-built and zoo graphs."""
from __future__ import annotations

from onnx import helper

from lilou.fusion.backends.eager import eager_partition
from lilou.fusion.eager_replay import (
    eager_views,
    replay_eager_groups,
    replayed_eager_fused_edges,
    silence_view_groups,
    without_view_bridges,
)
from lilou.fusion.features import EAGER_PRIOR_COLUMN, TVM_PRIOR_COLUMN, fusion_arrays, with_backend_prior
from lilou.fusion.partition import fused_edge_labels, partition_from_fused_edges
from lilou.graph.dag import build_graph
from tests.onnx_builders import ints, make_model, tensor, weight
from tests.test_fusion import tiny_bert  # noqa: F401 - pytest fixture


def groups_of(graph) -> set[frozenset[str]]:
    replay = replay_eager_groups(graph)
    return {frozenset(n for n, g in replay.items() if g == root) for root in set(replay.values())}


def merge_heads_model():
    """Attention's head merge: softmax -> dropout -> transpose -> .contiguous() -> view -> relu."""
    nodes = [
        helper.make_node("Softmax", ["x"], ["s"], name="softmax"),
        helper.make_node("Identity", ["s"], ["d"], name="dropout"),
        helper.make_node("Transpose", ["d"], ["t"], name="transpose", perm=[0, 2, 1, 3]),
        helper.make_node("Identity", ["t"], ["c"], name="contiguous"),
        helper.make_node("Reshape", ["c", "shape"], ["v"], name="view"),
        helper.make_node("Relu", ["v"], ["y"], name="relu"),
    ]
    return make_model(nodes, [tensor("x", [1, 2, 4, 8])], [tensor("y", [1, 4, 16])], [ints("shape", [1, 4, 16])])


def patch_merge_model():
    """Swin's patch merging: one view read by two strided slices, both read by one concat."""
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["v"], name="view"),
        helper.make_node("Slice", ["v", "s0", "e", "ax", "st"], ["a"], name="slice_even"),
        helper.make_node("Slice", ["v", "s1", "e", "ax", "st"], ["b"], name="slice_odd"),
        helper.make_node("Concat", ["a", "b"], ["y"], name="cat", axis=-1),
    ]
    inits = [ints("shape", [1, 4, 4, 8]), ints("s0", [0]), ints("s1", [1]), ints("e", [4]), ints("ax", [1]),
             ints("st", [2])]
    return make_model(nodes, [tensor("x", [1, 16, 8])], [tensor("y", [1, 2, 4, 16])], inits)


def test_contiguous_copy_is_a_kernel_and_dropout_is_not():
    # Dropout and the transpose are views, read in place by the copy; the view after the copy is read by relu.
    assert groups_of(build_graph(merge_heads_model())) == {
        frozenset({"softmax"}), frozenset({"dropout", "transpose", "contiguous"}), frozenset({"view", "relu"})}


def test_a_view_read_by_views_of_one_kernel_collapses_into_it():
    assert groups_of(build_graph(patch_merge_model())) == {frozenset({"view", "slice_even", "slice_odd", "cat"})}


def test_replay_matches_the_oracle_on_a_dynamo_bert_layer(tiny_bert):  # noqa: F811
    """Views, dropout, the .contiguous() copy and each linear's bias Add: every edge as the oracle has it."""
    _, model, graph = tiny_bert
    assert replayed_eager_fused_edges(graph) == fused_edge_labels(graph, eager_partition(model, graph))


def test_decompositions_need_their_exact_shape():
    """MatMul + Add is one aten.linear only with a constant weight and bias; x * sigmoid(x) only on the same x."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="linear_matmul"),
        helper.make_node("Add", ["m", "b"], ["l"], name="linear_bias"),
        helper.make_node("MatMul", ["l", "x2"], ["s"], name="scores"),  # activation @ activation
        helper.make_node("Add", ["s", "b2"], ["a"], name="mask_add"),
        helper.make_node("Sigmoid", ["a"], ["g"], name="sigmoid"),
        helper.make_node("Mul", ["a", "g"], ["silu"], name="silu_mul"),
        helper.make_node("Mul", ["silu", "g"], ["y"], name="gate_mul"),  # reads the sigmoid, but not of its input
    ]
    model = make_model(nodes, [tensor("x", [4, 8]), tensor("x2", [8, 8])], [tensor("y", [4, 8])],
                       [weight("w", [8, 8]), weight("b", [8]), weight("b2", [8])])
    assert groups_of(build_graph(model)) == {
        frozenset({"linear_matmul", "linear_bias"}), frozenset({"scores"}), frozenset({"mask_add"}),
        frozenset({"sigmoid", "silu_mul"}), frozenset({"gate_mul"})}


def test_group_norm_decomposition_is_one_kernel():
    """aten.group_norm: reshape to groups, InstanceNormalization, reshape back, affine Mul + Add."""
    nodes = [
        helper.make_node("Reshape", ["x", "groups"], ["g"], name="to_groups"),
        helper.make_node("InstanceNormalization", ["g", "ones", "zeros"], ["n"], name="normalise"),
        helper.make_node("Reshape", ["n", "back"], ["r"], name="from_groups"),
        helper.make_node("Mul", ["r", "w"], ["m"], name="scale"),
        helper.make_node("Add", ["m", "b"], ["a"], name="shift"),
        helper.make_node("Mul", ["a", "a"], ["y"], name="square"),
    ]
    model = make_model(nodes, [tensor("x", [1, 8, 4, 4])], [tensor("y", [1, 8, 4, 4])],
                       [ints("groups", [1, 2, -1]), ints("back", [1, 8, 4, 4]), weight("ones", [2]),
                        weight("zeros", [2]), weight("w", [8, 1, 1]), weight("b", [8, 1, 1])])
    assert groups_of(build_graph(model)) == {
        frozenset({"to_groups", "normalise", "from_groups", "scale", "shift"}), frozenset({"square"})}
    # Without the affine, the reshape back still belongs to the norm's kernel, which does not join its reader.
    del model.graph.node[3:5]
    model.graph.node[3].input[:] = ["r", "r"]
    assert groups_of(build_graph(model)) == {frozenset({"to_groups", "normalise", "from_groups"}),
                                             frozenset({"square"})}


def test_each_backend_sees_only_its_own_prior():
    arrays = fusion_arrays(build_graph(merge_heads_model()))
    assert arrays.edge_attr[:, EAGER_PRIOR_COLUMN].any() and arrays.edge_attr[:, TVM_PRIOR_COLUMN].any()
    full = arrays.edge_attr
    eager, tvm = with_backend_prior(full, "eager"), with_backend_prior(full, "tvm")
    assert not eager[:, TVM_PRIOR_COLUMN].any() and (eager[:, EAGER_PRIOR_COLUMN] == full[:, EAGER_PRIOR_COLUMN]).all()
    assert not tvm[:, EAGER_PRIOR_COLUMN].any() and (tvm[:, TVM_PRIOR_COLUMN] == full[:, TVM_PRIOR_COLUMN]).all()


def test_a_select_is_a_view_and_an_index_select_is_not():
    """``x[:, 3]`` exports as a Gather of one constant 0-d index (``aten.select``, a view): it joins its reader's
    kernel, and a ``.contiguous()`` of it is a copy. A Gather of an index list copies (``index_select``)."""
    scalar = helper.make_tensor("i", 7, [], [3])  # INT64, 0-d
    nodes = [helper.make_node("Gather", ["x", "i"], ["s"], name="select", axis=1),
             helper.make_node("Relu", ["s"], ["y"], name="relu"),
             helper.make_node("Gather", ["x", "rows"], ["g"], name="index_select", axis=1),
             helper.make_node("Gather", ["x", "i"], ["s2"], name="select_2", axis=1),
             helper.make_node("Identity", ["s2"], ["c"], name="contiguous"),
             helper.make_node("Neg", ["g"], ["z"], name="neg")]
    graph = build_graph(make_model(nodes, [tensor("x", [4, 8])], [tensor("y", None), tensor("z", None), tensor("c", None)],
                                   [scalar, ints("rows", [1, 2])]))
    runtime = graph.runtime_nodes()
    assert eager_views(graph, runtime) == {"select", "select_2"}
    assert groups_of(graph) == {frozenset({"select", "relu"}), frozenset({"index_select"}), frozenset({"neg"}),
                                frozenset({"select_2", "contiguous"})}


def test_a_view_read_by_two_kernels_does_not_merge_them():
    """An Identity read by two MatMuls, both edges predicted fused: the view belongs to neither kernel, so the
    edges are dropped and the view is left alone, launching nothing (Switch Transformer's shared position bias
    read by 48 matmuls was one 48-matmul kernel). With the readers joined in one kernel, the edges stay."""
    nodes = [helper.make_node("Identity", ["x"], ["v"], name="view"),
             helper.make_node("MatMul", ["v", "w1"], ["a"], name="a"),
             helper.make_node("MatMul", ["v", "w2"], ["b"], name="b"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    graph = build_graph(make_model(nodes, [tensor("x", [4, 8])], [tensor("y", None)],
                                   [weight("w1", [8, 8]), weight("w2", [8, 8])]))
    through_view = [("view", "a"), ("view", "b")]
    assert without_view_bridges(graph, through_view) == []
    partition = silence_view_groups(graph, partition_from_fused_edges(graph, without_view_bridges(graph, through_view),
                                                                      "eager"))
    assert [k.nodes for k in partition.kernels] == [("a",), ("b",), ("add",)]
    assert [g.reason for g in partition.groups if g.nodes == ("view",)] == ["view"]
    everything = [*through_view, ("a", "add"), ("b", "add")]
    assert sorted(without_view_bridges(graph, everything)) == sorted(everything)


def test_a_library_call_shares_its_kernel_with_views_into_it_only():
    """Gemm, Conv and ConvTranspose (one cuBLAS or cuDNN call in eager, the bias its own epilogue): a fused edge
    from a non-view producer into one, or out of one to its reader, directly or through a view, is dropped; a
    view into it stays (the eager oracle fuses exactly those, docs/fusion.md)."""
    from lilou.fusion.eager_replay import kept_whole

    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "flat"], ["f"], name="view_in"),
        helper.make_node("Gemm", ["f", "w", "b"], ["g"], name="gemm", transB=1),
        helper.make_node("Reshape", ["g", "back"], ["v"], name="view_out"),
        helper.make_node("Tanh", ["v"], ["y"], name="tanh"),
        helper.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"),
        helper.make_node("Gemm", ["s", "w2", "b"], ["z"], name="gemm2", transB=1),
    ]
    model = make_model(nodes, [tensor("x", [4, 8])], [tensor("y", [4, 2, 4]), tensor("z", [4, 8])],
                       [ints("flat", [4, 8]), weight("w", [8, 8]), weight("b", [8]), ints("back", [4, 2, 4]),
                        weight("w2", [8, 8])])
    graph = build_graph(model)
    fused = [("relu", "view_in"), ("view_in", "gemm"), ("gemm", "view_out"), ("view_out", "tanh"),
             ("sigmoid", "gemm2")]
    assert kept_whole(graph, fused) == [("relu", "view_in"), ("view_in", "gemm"), ("view_out", "tanh")]
    assert kept_whole(graph, [("gemm", "view_out")]) == [("gemm", "view_out")]  # a view nothing further joins


def test_nonzero_is_a_library_call_of_its_own():
    """``torch.nonzero(x > 0)``: eager runs the comparison, then CUB's nonzero (a count, its copy to the host, a
    select), never one kernel. No labelled graph holds a NonZero; a version-8 fusion model joined ``Greater ->
    NonZero``, and the composition then missed the nonzero call (its count, copy and select). The transpose of its
    coordinates, a view, stays with it."""
    from lilou.fusion.eager_replay import kept_whole

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Greater", ["r", "zero"], ["mask"], name="positive"),
             helper.make_node("NonZero", ["mask"], ["i"], name="nonzero"),
             helper.make_node("Transpose", ["i"], ["y"], name="coordinates", perm=[1, 0])]
    graph = build_graph(make_model(nodes, [tensor("x", [8, 512])], [tensor("y", [None, 2], 7)], [weight("zero", [])]))
    fused = [("relu", "positive"), ("positive", "nonzero"), ("nonzero", "coordinates")]
    assert kept_whole(graph, fused) == [("relu", "positive"), ("nonzero", "coordinates")]


def test_a_projection_named_as_a_calls_inner_value_keeps_apart_from_the_bmm_after_its_view():
    """onnxsim drops a dynamo export's zero bias, so a projection's MatMul writes ``val_<k>`` (a name the exporter
    gives a call's inner values) straight into the view that feeds the attention's ``bmm``. The names put the MatMul
    and the view in one call; eager still runs the projection and the ``bmm`` as two cuBLAS calls (BERT after onnxsim
    read 160 kernels for TorchScript's 196). A scaled product (``baddbmm``'s MatMul -> Mul) keeps its edge."""
    from lilou.fusion.eager_replay import kept_whole

    nodes = [helper.make_node("MatMul", ["x", "wq"], ["val_41"], name="node_MatMul_39"),
             helper.make_node("Reshape", ["val_41", "heads"], ["val_42"], name="node_view"),
             helper.make_node("Transpose", ["val_42"], ["val_43"], name="node_transpose", perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["val_43", "k"], ["val_44"], name="node_matmul"),
             helper.make_node("Mul", ["val_44", "scale"], ["scaled"], name="node_mul")]
    model = make_model(nodes, [tensor("x", [2, 16, 64]), tensor("k", [2, 4, 16, 16])], [tensor("scaled", [2, 4, 16, 16])],
                       [weight("wq", [64, 64]), ints("heads", [2, 16, 4, 16]), weight("scale", [])])
    graph = build_graph(model)
    fused = [("node_MatMul_39", "node_view"), ("node_view", "node_transpose"), ("node_transpose", "node_matmul"),
             ("node_matmul", "node_mul")]
    assert kept_whole(graph, fused) == [("node_view", "node_transpose"), ("node_transpose", "node_matmul"),
                                        ("node_matmul", "node_mul")]


def test_a_torchscript_rnn_loop_runs_each_addmm_and_tanh_apart():
    """The GNN joined each step's Tanh to the next step's Gemm in a scripted RNN-style loop (unrolled at batch 2):
    eager runs addmm, then tanh, per step."""
    from pathlib import Path

    from lilou.fusion.predict import predict_partition
    from lilou.graph.dag import load_graph

    graph = load_graph(str(Path(__file__).parent / "data" / "control_flow" / "scripted-loop-3.onnx"), batch=2)
    groups = [group.nodes for group in predict_partition(graph, "eager").groups if group.launches]
    ops = [[graph.dag.nodes[n]["op"] for n in nodes] for nodes in groups]
    assert ops == [["Gemm"], ["Tanh"], ["Gemm"], ["Tanh"], ["Gemm"], ["Tanh"]]


def matmul_tanh_chain(steps: int = 10):
    """x[4, 8] -> Relu -> ``steps`` x (MatMul W[8, 8] -> Tanh) -> Relu: a Python loop (or an ONNX Loop, unrolled)."""
    nodes = [helper.make_node("Relu", ["x"], ["t0"], name="pre")]
    for i in range(steps):
        nodes += [helper.make_node("MatMul", [f"t{i}", "w"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Tanh", [f"m{i}"], [f"t{i + 1}"], name=f"tanh{i}")]
    nodes.append(helper.make_node("Relu", [f"t{steps}"], ["z"], name="post"))
    return build_graph(make_model(nodes, [tensor("x", [4, 8])], [tensor("z", [4, 8])], [weight("w", [8, 8])]))


def test_no_eager_kernel_holds_a_matmul_and_another_call():
    """A MatMul is one cuBLAS call: the ceiling on the GNN's joins cuts every edge into or out of one but its views'
    and its own aten call's, and tanh -> relu are two calls. The GNN made the small chain 3 kernels (9 MatMuls and
    10 Tanh in one); eager runs 22, one per node, as it does for the 64 x 512 chain."""
    from lilou.fusion.eager_replay import kept_whole
    from lilou.fusion.partition import runtime_edges
    from lilou.fusion.predict import predict_partition

    graph = matmul_tanh_chain()
    assert kept_whole(graph, runtime_edges(graph)) == []
    kernels = predict_partition(graph, "eager").kernels
    assert [list(k.nodes) for k in kernels] == [[n] for n in graph.nodes_in_order()]


def test_a_matmul_keeps_its_bias_and_views_only():
    """linear as MatMul + bias Add stays one kernel, a view into the MatMul joins it, and a view after it joins the
    reader's kernel, not the MatMul's."""
    from lilou.fusion.eager_replay import kept_whole

    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "flat"], ["f"], name="view_in"),
        helper.make_node("MatMul", ["f", "w"], ["m"], name="mm"),
        helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
        helper.make_node("Transpose", ["a"], ["t"], name="view_out", perm=[1, 0]),
        helper.make_node("Sigmoid", ["t"], ["y"], name="sigmoid"),
    ]
    model = make_model(nodes, [tensor("x", [4, 2, 4])], [tensor("y", [8, 4])],
                       [ints("flat", [4, 8]), weight("w", [8, 8]), weight("b", [8])])
    graph = build_graph(model)
    fused = [("relu", "view_in"), ("view_in", "mm"), ("mm", "bias"), ("bias", "view_out"), ("view_out", "sigmoid")]
    assert kept_whole(graph, fused) == [("relu", "view_in"), ("view_in", "mm"), ("mm", "bias"),
                                        ("view_out", "sigmoid")]
    assert kept_whole(graph, [("relu", "view_in"), ("view_in", "mm"), ("mm", "view_out")]) == [
        ("relu", "view_in"), ("view_in", "mm")]  # a view after a matmul: nothing of its call reads it


class _MaskedAttention:
    """Hand-written attention with a 0/1 mask, its output's ``transpose(1, 2).reshape(B, T, C)`` (a copy: no strides
    allow it) projected, then a hand-written layer norm (``x.mean()`` and ``x - m`` two calls)."""

    @staticmethod
    def module():
        import torch

        class Attention(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.q, self.k, self.v, self.out = (torch.nn.Linear(32, 32) for _ in range(4))

            def forward(self, x, mask):
                b, t, c = x.shape
                q, k, v = (proj(x).view(b, t, 4, 8).transpose(1, 2) for proj in (self.q, self.k, self.v))
                scores = (q @ k.transpose(-2, -1)) / 8 ** 0.5
                scores = scores.masked_fill(mask.unsqueeze(1) == 0, float("-inf"))
                y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
                y = self.out(y)
                centred = y - y.mean(-1, keepdim=True)
                return centred / (centred.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()

        return Attention().eval(), (torch.randn(2, 6, 32), torch.ones(2, 6, 6, dtype=torch.long))


def test_hand_written_attention_is_predicted_as_the_eager_oracle_groups_it(tmp_path):
    """The GNN merged the head-merge copy into the output projection, ``mask == 0`` into ``masked_fill`` and
    ``x.mean()`` into ``x - m``: 3 kernels short of the oracle's on a dynamo export."""
    import torch

    from lilou.fusion.predict import predict_partition
    from lilou.graph.dag import load_graph

    module, example = _MaskedAttention.module()
    path = tmp_path / "attention.onnx"
    torch.onnx.export(module, example, path, dynamo=True)
    graph = load_graph(path, restore_folded=False)
    oracle = {tuple(g.nodes) for g in eager_partition(__import__("onnx").load(path), graph).kernels}
    predicted = {tuple(g.nodes) for g in predict_partition(graph, "eager").kernels}
    ops = {tuple(graph.dag.nodes[n]["op"] for n in group) for group in oracle}
    assert {("Transpose", "Reshape"), ("Unsqueeze", "Equal"), ("Where",), ("ReduceMean",), ("Sub",)} <= ops
    assert predicted == oracle


def test_two_calls_stay_apart_through_a_view_between_them():
    """tanh, then a view (the Identity an unrolled Loop writes for its final value), then relu: two calls, two
    kernels; the view joins its reader."""
    from lilou.fusion.eager_replay import kept_whole

    nodes = [helper.make_node("Tanh", ["x"], ["t"], name="tanh"),
             helper.make_node("Identity", ["t"], ["i"], name="final"),
             helper.make_node("Relu", ["i"], ["y"], name="relu")]
    graph = build_graph(make_model(nodes, [tensor("x", [4, 8])], [tensor("y", [4, 8])]))
    assert kept_whole(graph, [("tanh", "final"), ("final", "relu")]) == [("final", "relu")]
