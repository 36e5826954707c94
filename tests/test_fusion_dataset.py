"""`make fusion-data`: the builder exports and labels real zoo graphs, resumes, and runs in worker processes."""
from __future__ import annotations

import json

import pytest

from lilou.fusion.dataset import build_fusion_dataset, catalogue
from lilou.fusion.partition import Partition, check_covers
from lilou.graph.dag import load_graph


@pytest.mark.slow
def test_parallel_build_labels_the_first_samples_and_resumes(tmp_path):
    pytest.importorskip("tvm")
    first_two = [spec.id for spec in catalogue()[:2]]
    assert first_two == ["bert-base-v0-dynamo", "bert-base-v0-ts"]
    finished = []
    counts = build_fusion_dataset(tmp_path, ("tvm",), limit=2, jobs=2, progress=finished.append)
    assert counts == {"graphs": 2, "labels": 2, "failed": 0}
    assert sorted(finished) == first_two
    for sample_id in first_two:
        model = tmp_path / "bert" / f"{sample_id}.onnx"
        partition = Partition.from_json(json.loads(model.with_suffix(".tvm.json").read_text()))
        check_covers(load_graph(model), partition)
        assert len(partition.kernels) >= 15  # one encoder layer: projections, attention, norms, FFN
    # A second run finds everything on disk and labels nothing again.
    assert build_fusion_dataset(tmp_path, ("tvm",), limit=2) == {"graphs": 2, "labels": 0, "failed": 0}


def test_a_sample_that_failed_is_skipped_unless_retried(tmp_path):
    spec = catalogue()[0]
    failed = tmp_path / spec.family / f"{spec.id}.failed"
    failed.parent.mkdir()
    failed.write_text("RuntimeError: export failed\n")
    assert build_fusion_dataset(tmp_path, ("tvm",), limit=1) == {"graphs": 0, "labels": 0, "failed": 1}
    assert not (tmp_path / spec.family / f"{spec.id}.onnx").exists()


def test_a_label_from_an_older_oracle_is_redone_and_the_feature_cache_follows(tmp_path):
    """Eager labels written by an older oracle version are relabelled; cached features reload the new labels."""
    from lilou.fusion.dataset import ORACLE_VERSIONS, label_is_current, load_sample

    spec = catalogue()[0]  # bert-base-v0-dynamo: one layer, seq 32
    assert build_fusion_dataset(tmp_path, ("eager",), limit=1) == {"graphs": 1, "labels": 1, "failed": 0}
    label = tmp_path / spec.family / f"{spec.id}.eager.json"
    payload = json.loads(label.read_text())
    assert payload["oracle_version"] == ORACLE_VERSIONS["eager"] == 4
    cached = load_sample(label.with_name(f"{spec.id}.onnx"), spec.family, ("eager",)).data.y_eager

    # What version 1 wrote: the attention dropout's clone (after the softmax) as its own group.
    old = Partition.from_json(payload)
    del payload["oracle_version"]
    kernels = [k["nodes"] for k in payload["kernels"]]
    dropout = next(n for nodes in kernels for n in nodes if n.startswith("node_clone_1"))
    payload["kernels"] = [[n for n in nodes if n != dropout] for nodes in kernels if nodes != [dropout]]
    payload["kernels"] = [{"nodes": nodes} for nodes in payload["kernels"] if nodes] + [{"nodes": [dropout]}]
    label.write_text(json.dumps(payload))
    assert not label_is_current(label, "eager") and label_is_current(label, "tvm")  # unversioned = 1
    assert not label_is_current(label.with_name("missing.json"), "eager")
    truncated = label.with_name("truncated.json")
    truncated.write_text(label.read_text()[:40])  # an interrupted build
    assert not label_is_current(truncated, "eager")
    stale = load_sample(label.with_name(f"{spec.id}.onnx"), spec.family, ("eager",)).data.y_eager
    assert int(stale.sum()) == int(cached.sum()) - 1  # the cache noticed the edited label

    assert build_fusion_dataset(tmp_path, ("eager",), limit=1) == {"graphs": 1, "labels": 1, "failed": 0}
    assert Partition.from_json(json.loads(label.read_text())).groups == old.groups
    assert (load_sample(label.with_name(f"{spec.id}.onnx"), spec.family, ("eager",)).data.y_eager == cached).all()
