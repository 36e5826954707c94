"""`python -m lilou.eval`: a checkpoint scored on held-out data by a Hydra run, metrics written to its folder."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_eval_entry_point_scores_the_shipped_kernel_model_in_sample_only_when_asked(tmp_path, datasets_dir):
    """The shipped checkpoint trained on the T4: its T4 errors were reported as held-out with no word of it."""
    env = {**os.environ, "LILOU_DATA_DIR": str(datasets_dir)}
    command = [sys.executable, "-m", "lilou.eval", "experiment=kernel_latency", "data.held_out_gpus=[t4]",
               "data.max_rows=3000", f"hydra.run.dir={tmp_path}"]
    refused = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].startswith(
        f"lilou.eval: error: checkpoint {REPO / 'checkpoints' / 'kernel_latency'} was trained on t4, which the "
        "held-out set names: its errors there are in-sample, not held-out")
    assert not (tmp_path / "metrics.json").exists()

    result = subprocess.run([*command, "in_sample=true"], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "lilou.eval: warning: IN-SAMPLE: the checkpoint trained on t4" in result.stderr
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["task"] == "kernel_latency"
    assert metrics["checkpoint"].endswith("checkpoints/kernel_latency")
    assert metrics["result"]["in_sample_gpus"] == ["t4"]
    rows = metrics["result"]["rows"]
    assert {r["gpu"] for r in rows} == {"t4"}
    assert {r["family"] for r in rows} >= {"gemm", "elementwise", "softmax", "layernorm", "conv"}
    assert all(r["n"] > 0 and r["mape"] > 0 and r["in_sample"] is True for r in rows)


def test_the_default_checkpoint_follows_the_experiment():
    """experiment=kernel_latency_tensor scored checkpoints/kernel_latency (the FP32 NeuSight model): 263 % on H200."""
    from lilou.eval import _checkpoint
    from lilou.research.ablation import compose

    def default(*overrides):
        return _checkpoint(compose(list(overrides), config_name="eval"))

    assert default("experiment=kernel_latency_tensor") == REPO / "checkpoints" / "kernel_latency_tensor"
    assert default("experiment=kernel_table") == REPO / "checkpoints" / "kernel_latency_tensor"
    assert default("experiment=kernel_latency") == REPO / "checkpoints" / "kernel_latency"
    assert default("experiment=kernel_latency", "checkpoint=/x/checkpoint") == Path("/x/checkpoint")


def test_eval_with_nothing_held_out_is_refused():
    from lilou.errors import LilouInputError
    from lilou.eval import evaluate_kernels
    from lilou.research.ablation import compose

    with pytest.raises(LilouInputError, match="^data.held_out_gpus is empty, so there is nothing to score"):
        evaluate_kernels(compose(["experiment=kernel_latency"], config_name="eval"))


def test_fusion_eval_without_graphs_fails_instead_of_writing_empty_metrics(tmp_path):
    """Run outside the repository, `data.root` (relative) found nothing: empty metrics, exit 0."""
    result = subprocess.run(
        [sys.executable, "-m", "lilou.eval", "experiment=fusion_gnn", f"data.root={tmp_path / 'nothing'}",
         f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert f"no labelled fusion graphs under {tmp_path / 'nothing'}" in result.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()
