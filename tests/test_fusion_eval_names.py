"""Fusion evaluation and training: unknown split and backend names refused up front, and scores on splits the
checkpoint trained on refused unless asked for (in_sample=true), then marked."""
from __future__ import annotations

from pathlib import Path

import pytest

from lilou.errors import LilouInputError


def fake_fusion_root(tmp_path: Path, families=("gptneo", "electra", "regnet")) -> Path:
    """Dataset files by name only: enough for the split and in-sample checks, which run before any graph is read."""
    root = tmp_path / "fusion"
    for family in families:
        (root / family).mkdir(parents=True)
        (root / family / f"{family}-v0-dynamo.onnx").write_bytes(b"")
    return root


def test_fusion_eval_refuses_a_split_the_checkpoint_trained_on(tmp_path, monkeypatch, capsys):
    """The shipped GNN trains on the test split: its test scores (100 % edges) were reported unmarked."""
    import lilou.fusion.training as training
    from lilou.eval import evaluate_fusion
    from lilou.research.ablation import compose

    root = fake_fusion_root(tmp_path)
    scored = []

    def held_out_metrics(predictor, root, backends, split="test", with_rules=True):
        scored.append(split)
        return {b: {"families": ["electra", "gptneo"], "gnn": {"all": {"edge_accuracy": 1.0}}} for b in backends}

    monkeypatch.setattr(training, "held_out_metrics", held_out_metrics)
    with pytest.raises(LilouInputError, match=r"^checkpoint .*checkpoints/fusion_gnn was trained on families of "
                                              r"split test \(electra, gptneo\): its scores there are in-sample"):
        evaluate_fusion(compose(["experiment=fusion_gnn", f"data.root={root}"], config_name="eval"))
    assert scored == []
    result = evaluate_fusion(compose(["experiment=fusion_gnn", f"data.root={root}", "in_sample=true"],
                                     config_name="eval"))
    assert "IN-SAMPLE" in capsys.readouterr().err
    assert result["in_sample_families"] == ["electra", "gptneo"]
    assert all(result[b]["in_sample"] is True for b in ("eager", "tvm"))
    # val: held out from the shipped model, scored without a mark
    result = evaluate_fusion(compose(["experiment=fusion_gnn", f"data.root={root}", "split=val"], config_name="eval"))
    assert result["in_sample_families"] == [] and "in_sample" not in result["eager"]


def test_fusion_in_sample_follows_the_recorded_train_splits(tmp_path):
    """A corpus family spans splits by exporter setting: trained on its train graphs, not on its test-exporter ones."""
    from lilou.eval import fusion_in_sample

    root = tmp_path / "fusion"
    (root / "op-silu").mkdir(parents=True)
    for setting in ("d18", "o18"):  # o18: the held-out exporter setting
        (root / "op-silu" / f"op-silu-v0-{setting}.onnx").write_bytes(b"")
    config = {"trained_on": ["op-silu"], "config": {"data": {"train_splits": ["train"]}}}
    assert fusion_in_sample(config, root, "train") == ["op-silu"]
    assert fusion_in_sample(config, root, "test-exporter") == []
    assert fusion_in_sample({"trained_on": ["op-silu"]}, root, "test-exporter") == ["op-silu"]  # no record: by name


def test_fusion_eval_refuses_an_unknown_split(tmp_path):
    """split=tset scored no graph: exit 0 with empty metrics."""
    from lilou.eval import evaluate_fusion
    from lilou.research.ablation import compose

    cfg = compose(["experiment=fusion_gnn", f"data.root={fake_fusion_root(tmp_path)}", "split=tset"],
                  config_name="eval")
    with pytest.raises(LilouInputError, match=r"^split: unknown split 'tset'; known: train, val, test, test-op, "
                                              r"test-exporter, all$"):
        evaluate_fusion(cfg)


@pytest.mark.parametrize(("setting", "message"), [
    ({"train_splits": ["bogus"]}, "data.train_splits: unknown split 'bogus'; known: train, val, test"),
    ({"train_splits": ["train", "bogus"]}, "data.train_splits: unknown split 'bogus'; known: train, val, test"),
    ({"backends": ["onnxrt"]}, "data.backends: unknown backend 'onnxrt'; choose one of: eager, tvm"),
])
def test_fusion_data_refuses_unknown_split_and_backend_names(tmp_path, setting, message):
    """They were blamed on missing data ("build them with make fusion-data"), or [train,bogus] dropped bogus."""
    from lilou.fusion.datamodule import FusionDataModule

    with pytest.raises(LilouInputError, match="^" + message):
        FusionDataModule(root=str(fake_fusion_root(tmp_path)), **setting).setup()


def test_fusion_eval_refuses_a_split_the_dataset_does_not_hold(tmp_path):
    """A partial dataset (no validation family) scored split=val as nothing: empty metrics, exit 0."""
    from lilou.errors import MissingDataError
    from lilou.eval import evaluate_fusion
    from lilou.research.ablation import compose

    root = fake_fusion_root(tmp_path, families=("gptneo", "bert"))
    with pytest.raises(MissingDataError, match=rf"^no fusion graphs of split val under {root} \(it holds train, "
                                               r"test\); build them with `make fusion-data`$"):
        evaluate_fusion(compose(["experiment=fusion_gnn", f"data.root={root}", "split=val"], config_name="eval"))
