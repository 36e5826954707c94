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
import sys
from pathlib import Path

import hydra
from hydra.utils import to_absolute_path
from omegaconf import DictConfig


def train_e2e_calibration(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from lilou.latency.composition.calibrate import main as calibrate

    output = Path(HydraConfig.get().runtime.output_dir) / "checkpoint"
    e2e = cfg.get("e2e") or {}
    argv = ["--output", str(output)]
    if e2e.get("models_dir"):
        argv += ["--models-dir", to_absolute_path(e2e.models_dir)]
    code = calibrate(argv)
    if code:
        raise RuntimeError(f"lilou.latency.composition.calibrate exited with {code}")
    metrics_path = output / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    metrics.update({"hydra_command": " ".join(["python -m lilou.train", *sys.argv[1:]]), "seed": cfg.seed})
    metrics_path.write_text(json.dumps(metrics, indent=2) + "\n")
    if cfg.get("output_checkpoint"):
        target = Path(to_absolute_path(cfg.output_checkpoint))
        target.mkdir(parents=True, exist_ok=True)
        for name in ("model.json", "config.json", "metrics.json"):
            shutil.copyfile(output / name, target / name)
    return float(metrics["leave_one_gpu_out"]["mape"])


@hydra.main(version_base="1.3", config_path="../../conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    return train_e2e_calibration(cfg)


if __name__ == "__main__":
    main()
