"""Kernel groups: the eager oracle, convex grouping from fused edges, rules, GNN features and training."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from onnx import helper

from lilou.fusion.backends.eager import eager_partition, launches_no_kernel
from lilou.fusion.evaluation import FusionScore, node_groups
from lilou.fusion.features import (
    FUSION_EDGE_FEATURES,
    FUSION_NODE_FEATURES,
    PRIOR_COLUMNS,
    TVM_PRIOR_COLUMN,
    fusion_arrays,
    fusion_data,
    with_backend_prior,
)
from lilou.fusion.eager_replay import silence_view_groups
from lilou.fusion.partition import (
    KernelGroup,
    Partition,
    check_covers,
    fused_edge_labels,
    partition_from_fused_edges,
    runtime_edges,
)
from lilou.fusion.rules import RuleTable, rule_partition, tune_rules
from lilou.graph.dag import build_graph
from lilou.graph.loading import load_onnx
from tests.onnx_builders import make_model, tensor

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "resnet18.onnx"
TINY_BERT = dict(batch=1, seq=16, num_hidden_layers=1, hidden_size=64, num_attention_heads=2,
                 intermediate_size=128, vocab_size=100, max_position_embeddings=32)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A one-layer BERT exported by the dynamo exporter (with its node metadata), weight-free."""
    from lilou.zoo.export import export_onnx
    from lilou.zoo.registry import build

    path = export_onnx(build("bert-base", **TINY_BERT), tmp_path_factory.mktemp("fusion") / "bert.onnx",
                       strip_weights=True)
    model = load_onnx(path)
    return path, model, build_graph(model, name="tiny-bert")


def _ops(graph, group) -> str:
    return " + ".join(graph.dag.nodes[n]["op"] for n in group.nodes)


def test_eager_oracle_one_bert_layer(tiny_bert):
    _, model, graph = tiny_bert
    partition = eager_partition(model, graph)
    check_covers(graph, partition)
    assert [_ops(graph, k) for k in partition.kernels] == [
        "Gather", "Add", "Add", "LayerNormalization",
        "MatMul + Add", "MatMul + Add",                                   # query, key projections
        "Reshape + Transpose + Reshape + Transpose + Transpose + MatMul",  # Q @ K^T reads both views in place
        "MatMul + Add",                                                   # value projection
        "Mul", "Add", "Softmax",
        "Reshape + Transpose + Identity + MatMul",  # probs @ V; the attention dropout (eval) is no kernel
        "Transpose + Identity",                                           # .contiguous(): one copy kernel
        "Reshape + MatMul + Add", "Identity + Add", "LayerNormalization",
        "MatMul + Add", "Gelu", "MatMul + Add", "Identity + Add", "LayerNormalization",
    ]
    # Eval-mode dropout read by several kernels (the embeddings' dropout, read by Q, K, V and the residual)
    # launches nothing and is kept, not dropped.
    silent = [g for g in partition.groups if not g.launches and g.reason == "view"]
    assert [_ops(graph, g) for g in silent] == ["Identity"]


def test_eager_oracle_resnet18_one_kernel_per_layer():
    model = load_onnx(EXAMPLE)
    graph = build_graph(model, name="resnet18")
    partition = eager_partition(model, graph)
    check_covers(graph, partition)
    ops = [_ops(graph, k) for k in partition.kernels]
    # cuDNN conv, BN, ReLU and the residual add are separate eager kernels; flatten is read in place by the Gemm.
    assert ops.count("Conv") == 20 and ops.count("BatchNormalization") == 20 and ops.count("Add") == 8
    assert ops[-3:] == ["Relu", "ReduceMean", "Reshape + Gemm"]
    assert len(partition.kernels) == len(graph.runtime_nodes()) - 1


def test_aten_view_ops_launch_no_kernel():
    assert launches_no_kernel("torch.ops.aten.transpose.int")
    assert launches_no_kernel("dropout")
    assert launches_no_kernel("torch.ops.aten._unsafe_view.default")  # a view torch does not mark as one
    assert launches_no_kernel("operator.getitem")
    assert not launches_no_kernel("torch.ops.aten.clone.default")
    assert not launches_no_kernel("torch.ops.aten.linear.default")


def test_eager_oracle_needs_exporter_metadata(tiny_bert):
    from lilou.errors import LilouInputError

    _, model, graph = tiny_bert
    stripped = type(model)()
    stripped.CopyFrom(model)
    for node in stripped.graph.node:
        del node.metadata_props[:]
    with pytest.raises(LilouInputError, match="dynamo exporter"):
        eager_partition(stripped, graph)


def _diamond():
    """a -> b -> d and a -> c -> d: fusing a, b and d but not c would need c to run inside the kernel."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"), helper.make_node("Relu", ["a"], ["b"], name="b"),
             helper.make_node("Exp", ["a"], ["c"], name="c"), helper.make_node("Add", ["b", "c"], ["d"], name="d")]
    return build_graph(make_model(nodes, [tensor("x", [4, 8])], [tensor("d", [4, 8])]), name="diamond")


def test_fused_edges_are_repaired_into_convex_groups():
    graph = _diamond()
    partition = partition_from_fused_edges(graph, [("a", "b"), ("b", "d")], "tvm")
    check_covers(graph, partition)
    assert node_groups(graph, partition) == {frozenset({"a", "b"}), frozenset({"c"}), frozenset({"d"})}
    assert [k.nodes for k in partition.kernels] == [("a", "b"), ("c",), ("d",)]
    # With the c edges fused too, the whole diamond is one convex kernel.
    everything = partition_from_fused_edges(graph, runtime_edges(graph), "tvm")
    assert [k.nodes for k in everything.kernels] == [("a", "b", "c", "d")]


def test_partition_json_roundtrip_and_edge_labels(tiny_bert):
    _, model, graph = tiny_bert
    truth = eager_partition(model, graph)
    again = Partition.from_json(truth.to_json())
    assert node_groups(graph, again) == node_groups(graph, truth)
    labels = fused_edge_labels(graph, truth)
    rebuilt = partition_from_fused_edges(graph, [e for e, fused in labels.items() if fused], "eager")
    assert node_groups(graph, rebuilt) == node_groups(graph, truth)
    score = FusionScore()
    score.add_partitions(graph, truth, rebuilt)
    assert score.as_dict()["exact_partition"] == 1.0 and score.as_dict()["edge_accuracy"] == 1.0


def test_tuned_rules_learn_majority_and_fall_back_to_defaults(tiny_bert):
    _, model, graph = tiny_bert
    truth = eager_partition(model, graph)
    table = tune_rules("eager", [(graph, fused_edge_labels(graph, truth))])
    assert table.rules[("MatMul", "Add", False)] is True
    assert table.rules[("LayerNormalization", "MatMul", True)] is False
    assert RuleTable("eager").fuses("Reshape", "MatMul", False)       # default: a view is read in place
    assert not RuleTable("eager").fuses("Conv", "Relu", False)        # eager never fuses two aten calls
    assert RuleTable("tvm").fuses("Conv", "Relu", False)              # TVM fuses elementwise into its producer
    predicted = rule_partition(graph, table)
    check_covers(graph, predicted)
    score = FusionScore()
    score.add_partitions(graph, truth, predicted)
    assert score.as_dict()["edge_accuracy"] > 0.9


def test_rule_table_save_load(tmp_path):
    table = RuleTable("tvm", {("Conv", "Relu", False): True, ("MatMul", "Softmax", True): False})
    table.save(tmp_path / "tvm.json")
    assert RuleTable.load(tmp_path / "tvm.json") == table


def test_fusion_features_and_labels(tiny_bert):
    _, model, graph = tiny_bert
    truth = eager_partition(model, graph)
    data = fusion_data(graph, {"eager": truth})
    assert data.x.shape == (len(graph.dag), FUSION_NODE_FEATURES)
    assert data.edge_attr.shape == (graph.dag.number_of_edges(), FUSION_EDGE_FEATURES)
    assert int(data.edge_mask.sum()) == len(runtime_edges(graph))
    assert int(data.y_eager.sum()) == sum(fused_edge_labels(graph, truth).values())
    assert not data.y_eager[~data.edge_mask].any()


def test_gnn_learns_eager_fusion_of_a_real_graph(tiny_bert, tmp_path):
    """A few hundred steps on one real graph must fit its labels: the model and loss are wired right."""
    import lightning as L
    from torch_geometric.loader import DataLoader

    from lilou.fusion.dataset import FusionSample, to_training_items
    from lilou.fusion.gnn_predictor import FusionPredictor
    from lilou.fusion.lit_module import FusionModule

    _, model, graph = tiny_bert
    truth = eager_partition(model, graph)
    sample = FusionSample("tiny", "bert", "dynamo", fusion_data(graph, {"eager": truth}), ("eager",))
    items = to_training_items([sample], ["eager"])
    L.seed_everything(0)
    torch.set_num_threads(1)
    module = FusionModule(hidden=32, layers=2, lr=1e-2)
    trainer = L.Trainer(max_epochs=150, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu")
    trainer.fit(module, DataLoader(items, batch_size=1))
    config = {"architecture": {"hidden": 32, "layers": 2, "conv": "gine", "dropout": 0.0}}
    predictor = FusionPredictor.from_torch(module.net, config)
    predicted = predictor.predict(graph, "eager")
    assert node_groups(graph, predicted) == node_groups(graph, truth)
    # The numpy runtime (what the CLI uses) computes what the torch model computes (for eager, without
    # the TVM prior column, as in training).
    data = fusion_data(graph)
    assert data.edge_attr[:, TVM_PRIOR_COLUMN].any()
    with torch.no_grad():
        logits = module.net(data.x, data.edge_index, with_backend_prior(data.edge_attr, "eager"), torch.tensor([0]),
                            torch.zeros(data.num_nodes, dtype=torch.long))
    arrays = fusion_arrays(graph)
    numpy_probabilities = predictor.edge_probabilities(arrays, "eager")
    assert numpy_probabilities == pytest.approx(torch.sigmoid(logits).numpy(), abs=1e-5)
    predictor.save(tmp_path / "ckpt", {"note": "test"})
    loaded = FusionPredictor.load(tmp_path / "ckpt")
    assert (loaded.edge_probabilities(arrays, "eager") == numpy_probabilities).all()


def _celu_model(tmp_path) -> Path:
    import onnx

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"), helper.make_node("Celu", ["a"], ["b"], name="c"),
             helper.make_node("Add", ["b", "x"], ["y"], name="add")]
    path = tmp_path / "celu.onnx"
    onnx.save(make_model(nodes, [tensor("x", [2, 8])], [tensor("y", [2, 8])]), path)
    return path


def test_fuse_cli_json_covers_every_runtime_node(capsys):
    import json

    from lilou.cli import main

    assert main(["fuse", str(EXAMPLE), "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["backend"] == "eager"
    graph = build_graph(load_onnx(EXAMPLE), name="resnet18")
    listed = [n for k in payload["kernels"] + payload["no_kernel"] for n in k["nodes"]]
    assert sorted(listed) == sorted(graph.dag.nodes)
    assert payload["source"] == "gnn" and payload["warnings"] == []


def test_fuse_cli_json_carries_the_table_s_warnings(tmp_path, capsys):
    """The JSON dropped them (and printed none on stderr), where the table prints them."""
    import json

    from lilou.cli import main

    assert main(["fuse", str(_celu_model(tmp_path)), "--backend", "tvm", "--format", "json"]) == 0
    captured = capsys.readouterr()
    warnings = json.loads(captured.out)["warnings"]
    assert any("never saw: Celu" in w for w in warnings)
    assert captured.err.splitlines() == [f"lilou: warning: {w}" for w in warnings]


def test_fuse_cli_unknown_op_fails_the_tvm_oracle_but_the_model_still_predicts(tmp_path, capsys):
    from lilou.cli import main

    path = _celu_model(tmp_path)
    assert main(["fuse", str(path), "--backend", "tvm", "--oracle"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["lilou: error: TVM cannot import op(s): Celu"]
    assert main(["fuse", str(path), "--backend", "tvm"]) == 0
    out = capsys.readouterr().out
    assert "never saw: Celu" in out


def test_ops_seen_are_the_op_types_of_the_graphs_labelled_for_each_backend(tmp_path):
    import onnx

    from lilou.fusion.dataset import FusionSample, op_types_seen

    (tmp_path / "op-celu").mkdir()
    onnx.save(onnx.load(_celu_model(tmp_path)), tmp_path / "op-celu" / "celu-d18.onnx")
    softmax = [helper.make_node("Softmax", ["x"], ["y"], name="s")]
    (tmp_path / "cnn").mkdir()
    onnx.save(make_model(softmax, [tensor("x", [2, 8])], [tensor("y", [2, 8])]), tmp_path / "cnn" / "sm-d18.onnx")
    samples = [FusionSample("celu-d18", "op-celu", "d18", None, ("eager",)),
               FusionSample("sm-d18", "cnn", "d18", None, ("eager", "tvm"))]
    assert op_types_seen(samples, tmp_path) == {"eager": ["Add", "Celu", "Relu", "Softmax"], "tvm": ["Softmax"]}


def test_shipped_gnn_keeps_an_unsupported_op_as_its_own_kernel():
    from lilou.fusion.gnn_predictor import FusionPredictor

    model = make_model([helper.make_node("Relu", ["x"], ["h"], name="relu"),
                        helper.make_node("Mystery", ["h"], ["m"], name="custom", domain="com.example"),
                        helper.make_node("Relu", ["m"], ["y"], name="after")],
                       [tensor("x", [8, 256])], [tensor("y", [8, 256])])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    graph = build_graph(model, name="custom")
    assert graph.unsupported_ops == ["Mystery"]
    for backend in ("eager", "tvm"):
        kernels = [k.nodes for k in FusionPredictor.load_shipped().predict(graph, backend).kernels]
        assert ("custom",) in kernels, (backend, kernels)


def test_fuse_cli_eager_oracle_without_metadata_is_a_clear_error(tmp_path, capsys):
    from lilou.cli import main

    assert main(["fuse", str(_celu_model(tmp_path)), "--oracle"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dynamo exporter" in err[0]


def test_a_stale_fusion_checkpoint_is_a_clear_error(tmp_path):
    """A checkpoint trained on another feature layout must not crash inside numpy."""
    import json

    import numpy as np
    from safetensors.numpy import save_file

    from lilou.errors import MissingDataError
    from lilou.fusion.gnn_predictor import FusionPredictor

    save_file({"node_in.0.weight": np.zeros((8, 75), np.float32),
               "edge_in.0.weight": np.zeros((8, FUSION_EDGE_FEATURES), np.float32)}, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"architecture": {"layers": 1}}))
    with pytest.raises(MissingDataError, match="trained on 75 node"):
        FusionPredictor.load(tmp_path)
    with pytest.raises(MissingDataError, match="no fusion checkpoint"):
        FusionPredictor.load(tmp_path / "absent")


def test_prior_and_name_dropout_hide_their_columns_of_whole_training_graphs(tiny_bert):
    """model.prior_dropout: a dropped graph loses the eager and TVM prior columns on every edge, the others keep
    every column; validation and inference always see the priors."""
    from torch_geometric.data import Batch

    from lilou.fusion.dataset import FusionSample, to_training_items
    from lilou.fusion.features import EAGER_PRIOR_COLUMN, EXPORT_NAME_COLUMN
    from lilou.fusion.lit_module import FusionModule

    _, model, graph = tiny_bert
    truth = eager_partition(model, graph)
    sample = FusionSample("tiny", "bert", "dynamo", fusion_data(graph, {"eager": truth}), ("eager",))
    batch = Batch.from_data_list(to_training_items([sample, sample, sample, sample], ["eager"]))
    assert batch.edge_attr[:, EAGER_PRIOR_COLUMN].sum() > 0  # the replay fuses some edges of a BERT layer

    torch.manual_seed(0)
    module = FusionModule(hidden=16, layers=1, prior_dropout=0.5)
    edge_attr = module._with_columns_dropped(batch)
    edge_graph = batch.batch[batch.edge_index[0]]
    dropped = [bool((edge_attr[edge_graph == g][:, list(PRIOR_COLUMNS.values())] == 0).all()) for g in range(4)]
    kept = [bool(torch.equal(edge_attr[edge_graph == g], batch.edge_attr[edge_graph == g])) for g in range(4)]
    assert all(d != k for d, k in zip(dropped, kept)) and any(dropped) and any(kept)
    other_columns = [c for c in range(FUSION_EDGE_FEATURES) if c not in PRIOR_COLUMNS.values()]
    assert torch.equal(edge_attr[:, other_columns], batch.edge_attr[:, other_columns])
    all_dropped = FusionModule(hidden=16, layers=1, prior_dropout=1.0)._with_columns_dropped(batch)
    assert not all_dropped[:, EAGER_PRIOR_COLUMN].any()
    # model.name_dropout hides the exporter-name column of whole graphs, and nothing else.
    assert batch.edge_attr[:, EXPORT_NAME_COLUMN].sum() > 0  # a dynamo BERT layer names its linear's MatMul -> Add
    names_dropped = FusionModule(hidden=16, layers=1, name_dropout=1.0)._with_columns_dropped(batch)
    assert not names_dropped[:, EXPORT_NAME_COLUMN].any()
    others = [c for c in range(FUSION_EDGE_FEATURES) if c != EXPORT_NAME_COLUMN]
    assert torch.equal(names_dropped[:, others], batch.edge_attr[:, others])


def test_predicted_groups_of_views_alone_launch_nothing_as_the_oracle_says(tmp_path):
    """GPT-2 splits its fused QKV projection (``torch.split``: SplitToSequence, a view in eager). The GNN puts
    the split in a group of its own, as the oracle does; that group must not launch a kernel (one per layer
    did before, each priced at a launch), while a ``.contiguous()`` copy of a transposed view still launches."""
    from lilou.fusion.predict import predict_partition
    from lilou.zoo.export import export_onnx
    from lilou.zoo.registry import build

    path = export_onnx(build("gpt2", batch=1, seq=16, n_layer=2, n_embd=64, n_head=2, vocab_size=100, n_positions=32),
                       tmp_path / "gpt2.onnx", strip_weights=True)
    graph = build_graph(load_onnx(path), name="tiny-gpt2", restore_folded=False)
    truth = eager_partition(load_onnx(path), graph)
    for method in ("gnn", "rules"):
        predicted = predict_partition(graph, "eager", method=method)
        splits = [g for g in predicted.groups if any(graph.dag.nodes[n]["op"] == "SplitToSequence" for n in g.nodes)]
        assert len(splits) == 2 and not any(g.launches for g in splits) and {g.reason for g in splits} == {"view"}
        copies = [g for g in predicted.kernels if [graph.dag.nodes[n]["op"] for n in g.nodes] == ["Transpose", "Identity"]]
        assert len(copies) == 2  # the merge of the heads before the output projection, one per layer
    # Every group the oracle keeps silent that the GNN predicted as it is stays silent.
    predicted = {frozenset(g.nodes): g.launches for g in predict_partition(graph, "eager").groups}
    silent = [frozenset(g.nodes) for g in truth.groups if not g.launches and g.reason == "view"]
    assert len(silent) >= 2 and all(not predicted[g] for g in silent if g in predicted)
    # The oracle's own groups with the two splits launching, as partitions built from edges alone had them:
    # the same node groups, two kernels more, which the kernel metrics see and the silencing undoes.
    launched = Partition("eager", [KernelGroup(g.nodes) if any(graph.dag.nodes[n]["op"] == "SplitToSequence"
                                                                for n in g.nodes) else g for g in truth.groups])
    score = FusionScore()
    score.add_partitions(graph, truth, launched)
    assert score.as_dict()["exact_partition"] == 1.0 and score.as_dict()["exact_kernels"] == 0.0
    assert score.as_dict()["kernel_count_ratio"] == (len(truth.kernels) + 2) / len(truth.kernels)
    score = FusionScore()
    score.add_partitions(graph, truth, silence_view_groups(graph, launched))
    assert score.as_dict()["exact_kernels"] == 1.0 and score.as_dict()["kernel_count_ratio"] == 1.0


def test_predict_partition_takes_the_backend_in_any_case():
    """``predict_partition(graph, "EAGER")`` predicted with the raw name and failed on the GNN's backend index."""
    from lilou.fusion.predict import predict_partition

    graph = build_graph(load_onnx(EXAMPLE), name="resnet18")
    for backend in ("eager", "tvm"):
        expected = predict_partition(graph, backend)
        for spelling in (backend.upper(), f" {backend.capitalize()} "):
            partition = predict_partition(graph, spelling)
            assert partition.backend == backend and partition.kernels == expected.kernels


def test_fuse_json_flags_the_names_lilou_made_up(tmp_path, capsys):
    """An unnamed node is keyed ``<op>_<index>`` and a repeated name gets ``__<k>``: `synthetic_nodes` lists them."""
    import json

    import onnx

    from lilou.cli import main

    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["b"]),
             helper.make_node("Tanh", ["b"], ["c"], name="dup"), helper.make_node("Neg", ["c"], ["y"], name="dup")]
    path = tmp_path / "unnamed.onnx"
    onnx.save(make_model(nodes, [tensor("x", [4, 8])], [tensor("y", [4, 8])]), path)
    assert main(["fuse", str(path), "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["synthetic_nodes"] == {name: {"named_by_lilou": True} for name in ("Relu_0", "Sigmoid_1", "dup__1")}
    assert {n for k in payload["kernels"] for n in k["nodes"]} == {"Relu_0", "Sigmoid_1", "dup", "dup__1"}


def test_training_writes_the_feature_version_and_a_repo_relative_data_path(tmp_path, monkeypatch):
    """What `make train-fusion` writes says how to rebuild it: the command, the data folder relative to the checkout
    (not this machine's absolute path), the feature and oracle versions and the commit; the loader reads the
    feature version back from config.json."""
    import json

    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    import lilou.fusion.training as training
    from lilou.fusion.dataset import ORACLE_VERSIONS, build_fusion_dataset
    from lilou.fusion.features import FEATURE_VERSION

    checkout = tmp_path / "checkout"  # stands for the repository root
    data = checkout / "datasets" / "fusion"
    counts = build_fusion_dataset(data, ["eager"], limit=1, families=["mlp"])
    assert counts["graphs"] == 1 and counts["failed"] == 0
    monkeypatch.setattr(training, "REPO", checkout, raising=False)
    monkeypatch.chdir(checkout)
    overrides = ["experiment=fusion_gnn", "data.root=datasets/fusion", "data.backends=[eager]", "data.train_splits=[train]",
                 "trainer.max_epochs=1", "trainer.enable_progress_bar=false", "model.hidden=8", "model.layers=1",
                 "~logger", "+score_rules=false", "output_checkpoint=out/fusion"]
    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(tmp_path / "run")
    HydraConfig.instance().set_config(cfg)
    try:
        training.train_fusion_model(cfg)
    finally:
        HydraConfig.instance().cfg = None
    for folder in (checkout / "out" / "fusion", tmp_path / "run" / "checkpoint"):
        for name in ("config.json", "metrics.json"):
            written = json.loads((folder / name).read_text())
            assert written["feature_version"] == FEATURE_VERSION, name
            assert written["oracle_versions"] == ORACLE_VERSIONS, name
            assert written["data"] == "datasets/fusion", name
            assert written["command"].startswith("python -m lilou.train experiment=fusion_gnn "), name
            assert str(tmp_path) not in json.dumps({k: v for k, v in written.items() if k != "config"}), name
            assert "git_commit" in written, name


def test_a_fusion_checkpoint_of_other_features_warns_when_loaded(tmp_path):
    """A checkpoint whose recorded feature version is not the code's (or that records none) is loaded with a
    warning that says so; one of the current version loads silently."""
    import json
    import warnings

    import numpy as np
    from safetensors.numpy import save_file

    from lilou.fusion.features import FEATURE_VERSION
    from lilou.fusion.gnn_predictor import FusionPredictor, StaleFusionCheckpointWarning

    save_file({"node_in.0.weight": np.zeros((8, FUSION_NODE_FEATURES), np.float32),
               "edge_in.0.weight": np.zeros((8, FUSION_EDGE_FEATURES), np.float32)}, tmp_path / "model.safetensors")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architecture": {"layers": 1}, "feature_version": "6"}))
    with pytest.warns(StaleFusionCheckpointWarning, match=f"features of version 6, but this code computes version "
                                                         f"{FEATURE_VERSION}"):
        FusionPredictor.load(tmp_path)
    config.write_text(json.dumps({"architecture": {"layers": 1}}))
    with pytest.warns(StaleFusionCheckpointWarning, match="records no feature version"):
        FusionPredictor.load(tmp_path)
    config.write_text(json.dumps({"architecture": {"layers": 1}, "feature_version": FEATURE_VERSION}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FusionPredictor.load(tmp_path)


def test_the_shipped_fusion_gnn_was_trained_on_the_features_this_code_computes():
    import json

    from lilou.checkpoints import FUSION_GNN, checkpoint_path
    from lilou.fusion.gnn_predictor import feature_version_mismatch

    config = json.loads((checkpoint_path(FUSION_GNN) / "config.json").read_text())
    assert feature_version_mismatch(config) is None
