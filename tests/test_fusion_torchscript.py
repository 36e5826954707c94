"""Eager kernels of TorchScript exports (``dynamo=False``): what that exporter drops or decomposes, on real exports.

TorchScript exports carry no aten-call metadata, so the eager replay reads the ONNX ops alone: the copy a
``reshape`` of a transposed tensor makes (the exporter drops ``.contiguous()``), a ``Cast`` to the type a tensor
already has (``.to()`` returns it), and the op chains TorchScript writes for one-kernel activations."""
from __future__ import annotations

import random

import pytest

from lilou.fusion.backends.eager import eager_partition
from lilou.fusion.eager_layout import contiguous_strides, permuted, view_strides
from lilou.fusion.eager_replay import eager_views, replay_eager_groups
from lilou.graph.dag import load_graph
from lilou.graph.loading import load_onnx

torch = pytest.importorskip("torch")


def _export(module, example, path, dynamo=False, **kwargs):
    torch.onnx.export(module.eval(), example, path, dynamo=dynamo, **kwargs)
    return load_graph(path)


def _kernels(graph) -> list[list[str]]:
    """The replay's kernel groups (launching ones: not all views), as sorted op lists, in a stable order."""
    replay = replay_eager_groups(graph)
    views = eager_views(graph, graph.runtime_nodes())
    groups: dict[str, list[str]] = {}
    for node, root in replay.items():
        groups.setdefault(root, []).append(node)
    return sorted(sorted(graph.dag.nodes[n]["op"] for n in nodes) for nodes in groups.values()
                  if not all(n in views for n in nodes))


def test_view_strides_agree_with_torch_on_permuted_tensors():
    rng = random.Random(0)
    for _ in range(400):
        shape = [rng.choice([1, 2, 3, 4]) for _ in range(rng.randint(2, 4))]
        perm = list(range(len(shape)))
        rng.shuffle(perm)
        tensor = torch.empty(shape).permute(perm)
        merged = [tensor.shape[0], tensor.numel() // tensor.shape[0]]
        for new_shape in (merged, [tensor.numel()], [*tensor.shape, 1]):
            try:
                expected = tuple(tensor.view(new_shape).stride())
            except RuntimeError:
                expected = None
            ours = view_strides(tuple(tensor.shape), permuted(contiguous_strides(shape), perm), tuple(new_shape))
            assert (ours is None) == (expected is None)
            if ours is not None:
                assert all(n == 1 or a == b for n, a, b in zip(new_shape, ours, expected))


class _MergeHeads(torch.nn.Module):
    """Attention's head merge as Hugging Face writes it: permute, then ``.contiguous().view`` (a copy in eager),
    and the split of heads before it (a view)."""

    def forward(self, x):  # x: (batch, heads, seq, dim)
        merged = x.permute(0, 2, 1, 3).contiguous().view(x.shape[0], x.shape[2], -1)
        split = merged.view(x.shape[0], x.shape[2], x.shape[1], -1).transpose(1, 2)
        return torch.relu(merged), split.sum(-1)


def test_a_reshape_of_a_transposed_tensor_copies_in_a_torchscript_export(tmp_path):
    graph = _export(_MergeHeads(), (torch.randn(2, 4, 8, 16),), tmp_path / "merge-ts.onnx")
    ops = [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()]
    assert "Identity" not in ops  # TorchScript dropped .contiguous()
    assert _kernels(graph) == [["ReduceSum", "Reshape", "Transpose"], ["Relu"], ["Reshape", "Transpose"]]


def test_the_optimised_dynamo_export_loses_the_clone_but_the_oracle_keeps_its_copy(tmp_path):
    """The dynamo exporter's optimiser removes ``aten.clone``'s Identity; eager still runs the copy."""
    path = tmp_path / "merge-opt.onnx"
    graph = _export(_MergeHeads(), (torch.randn(2, 4, 8, 16),), path, dynamo=True, optimize=True)
    assert "Identity" not in [graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()]
    oracle = eager_partition(load_onnx(path), graph)
    launching = sorted(sorted(graph.dag.nodes[n]["op"] for n in g.nodes) for g in oracle.groups if g.launches)
    assert launching == [["ReduceSum", "Reshape", "Transpose"], ["Relu"], ["Reshape", "Transpose"]]
    assert _kernels(graph) == launching


class _RMSNorm(torch.nn.Module):
    """T5's layer norm: ``.to(torch.float32)`` of a float32 tensor, then ``torch.rsqrt``."""

    def forward(self, x):
        x = x.to(torch.float32)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def test_a_cast_to_its_own_type_is_a_view_and_rsqrt_one_kernel(tmp_path):
    graph = _export(_RMSNorm(), (torch.randn(4, 64),), tmp_path / "rms-ts.onnx")
    ops = sorted(graph.dag.nodes[n]["op"] for n in graph.runtime_nodes())
    assert ops == ["Add", "Cast", "Div", "Mul", "Pow", "ReduceMean", "Sqrt"]
    assert _kernels(graph) == [["Add"], ["Div", "Sqrt"], ["Mul"], ["Pow"], ["ReduceMean"]]


@pytest.mark.parametrize("activation, ops", [
    (lambda x: torch.nn.functional.mish(x), ["Mul", "Softplus", "Tanh"]),
    (lambda x: torch.nn.functional.logsigmoid(x), ["Log", "Sigmoid"]),
    (lambda x: torch.nn.functional.glu(x, -1), ["Mul", "Sigmoid", "Split"]),
    (lambda x: torch.nn.functional.gelu(x, approximate="tanh"), ["Add", "Add", "Mul", "Mul", "Mul", "Mul", "Mul",
                                                                  "Mul", "Tanh"]),
    (lambda x: torch.nn.functional.softplus(x, beta=2.0), ["Div", "Mul", "Softplus"]),
    (lambda x: torch.ne(x, 0.0).float(), ["Cast", "Equal", "Not"]),
])
def test_torchscript_forms_of_one_kernel_activations_are_one_kernel(tmp_path, activation, ops):
    class Activation(torch.nn.Module):
        def forward(self, x):
            return activation(x)

    graph = _export(Activation(), (torch.randn(4, 64),), tmp_path / "act-ts.onnx", opset_version=17)
    assert sorted(graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()) == ops
    kernels = _kernels(graph)
    if "Not" in ops:  # aten.ne, then the cast to float: two kernels
        assert kernels == [["Cast"], ["Equal", "Not"]]
    else:
        assert len(kernels) == 1


def test_hardswish_before_opset_14_is_one_kernel(tmp_path):
    """``F.hardswish`` at opset 13 is ``HardSigmoid`` and ``Mul`` (as onnxruntime's saved sessions keep it): one
    kernel in eager, as the ``HardSwish`` node of opset 14 is. It was two."""

    class Block(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.hardswish(x) + 1.0

    old = _export(Block(), (torch.randn(4, 64),), tmp_path / "hardswish-13.onnx", opset_version=13)
    new = _export(Block(), (torch.randn(4, 64),), tmp_path / "hardswish-14.onnx", opset_version=14)
    assert sorted(old.dag.nodes[n]["op"] for n in old.runtime_nodes()) == ["Add", "HardSigmoid", "Mul"]
    assert _kernels(old) == [["Add"], ["HardSigmoid", "Mul"]]
    assert _kernels(new) == [["Add"], ["HardSwish"]]


def test_a_hand_written_tanh_gelu_stays_several_kernels(tmp_path):
    """Hugging Face's ``NewGELUActivation`` computes ``torch.pow(x, 3.0)``: TorchScript writes a Pow, not
    ``x * x * x``, and eager runs it as separate kernels. (Its dynamo export: the call names keep it apart.)"""

    class NewGELU(torch.nn.Module):
        def forward(self, x):
            return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))

    graph = _export(NewGELU(), (torch.randn(4, 64),), tmp_path / "newgelu-ts.onnx", opset_version=17)
    assert "Pow" in {graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()}
    assert len(_kernels(graph)) > 1


def test_a_torchscript_export_is_scored_against_the_oracle_of_its_dynamo_twin(tmp_path):
    import json

    from lilou.fusion.benchmark import torchscript_twins

    family = tmp_path / "merge"
    family.mkdir()
    example = (torch.randn(2, 4, 8, 16),)
    _export(_MergeHeads(), example, family / "merge-v0-ts.onnx")
    graph = _export(_MergeHeads(), example, family / "merge-v0-d18.onnx", dynamo=True, optimize=False)
    truth = eager_partition(load_onnx(family / "merge-v0-d18.onnx"), graph)
    (family / "merge-v0-d18.eager.json").write_text(json.dumps(truth.to_json()))
    _export(_MergeHeads(), example, family / "alone-v0-ts.onnx")  # no dynamo twin: not scored
    (twin,) = torchscript_twins(tmp_path)
    assert (twin.spec, twin.family, twin.path.name, twin.oracle_kernels) == ("merge-v0", "merge", "merge-v0-ts.onnx", 3)
