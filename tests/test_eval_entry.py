"""`python -m lilou.eval`: a checkpoint scored on held-out data by a Hydra run, metrics written to its folder."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_eval_entry_point_scores_the_shipped_kernel_model_on_a_held_out_gpu(tmp_path, datasets_dir):
    env = {**os.environ, "LILOU_DATA_DIR": str(datasets_dir)}
    result = subprocess.run(
        [sys.executable, "-m", "lilou.eval", "experiment=kernel_latency", "data.held_out_gpus=[t4]",
         "data.max_rows=3000", f"hydra.run.dir={tmp_path}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["task"] == "kernel_latency"
    assert metrics["checkpoint"].endswith("checkpoints/kernel_latency")
    rows = metrics["result"]["rows"]
    assert {r["gpu"] for r in rows} == {"t4"}
    assert {r["family"] for r in rows} >= {"gemm", "elementwise", "softmax", "layernorm", "conv"}
    assert all(r["n"] > 0 and r["mape"] > 0 for r in rows)


def test_fusion_eval_without_graphs_fails_instead_of_writing_empty_metrics(tmp_path):
    """Run outside the repository, `data.root` (relative) found nothing: empty metrics, exit 0."""
    result = subprocess.run(
        [sys.executable, "-m", "lilou.eval", "experiment=fusion_gnn", f"data.root={tmp_path / 'nothing'}",
         f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert f"no labelled fusion graphs under {tmp_path / 'nothing'}" in result.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()
