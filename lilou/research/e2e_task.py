"""Hydra task ``e2e_calibration``: the end-to-end fit of ``make fit-e2e`` as a Hydra run.

Fits the memory-bound fallback, the dispatch gap and the launch-queue scale
(:mod:`lilou.latency.composition.calibrate`) against the shipped per-kernel checkpoint and writes the
result (``model.json``, ``config.json``, ``metrics.json``) to ``<run dir>/checkpoint``;
``output_checkpoint=checkpoints/e2e_overhead`` also replaces the shipped one. The fit is
closed-form (no random state); ``seed`` is recorded only.

    python -m lilou.research.e2e_task experiment=e2e_calibration
    python -m lilou.train experiment=e2e_calibration
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import hydra
from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from lilou.errors import exit_on_input_error, run_hydra_main
from lilou.runs import data_dir_used, run_provenance, writable_folder


def train_e2e_calibration(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from lilou.latency.composition.calibrate import main as calibrate

    target = None
    if cfg.get("output_checkpoint"):  # a bad path was found only after the fit, as a traceback
        target = writable_folder(to_absolute_path(cfg.output_checkpoint), "output_checkpoint")
    output = Path(HydraConfig.get().runtime.output_dir) / "checkpoint"
    e2e = cfg.get("e2e") or {}
    argv = ["--output", str(output)]
    if e2e.get("models_dir"):
        argv += ["--models-dir", to_absolute_path(e2e.models_dir)]
    code = calibrate(argv)
    if code:
        raise RuntimeError(f"lilou.latency.composition.calibrate exited with {code}")
    # This job's command (its own overrides under a sweep, the entry it was run by), commit, data folder, date.
    run = run_provenance(data_dir_used())
    config_path = output / "config.json"
    config = json.loads(config_path.read_text())
    config.update({k: run[k] for k in ("command", "git_commit", "data_dir")})
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    metrics_path = output / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    metrics.update({**run, "seed": cfg.seed})
    metrics_path.write_text(json.dumps(metrics, indent=2) + "\n")
    if target is not None:
        for name in ("model.json", "config.json", "metrics.json"):
            shutil.copyfile(output / name, target / name)
    return float(metrics["leave_one_gpu_out"]["mape"])


@hydra.main(version_base="1.3", config_path="../../conf", config_name="train")
@exit_on_input_error("lilou.research.e2e_task")
def main(cfg: DictConfig) -> float | None:
    """Bad input (an unwritable output_checkpoint, missing data) is one line on stderr and exit status 2, as in
    ``python -m lilou.train``."""
    return train_e2e_calibration(cfg)


if __name__ == "__main__":
    run_hydra_main(main, "lilou.research.e2e_task")
