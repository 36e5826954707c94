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
