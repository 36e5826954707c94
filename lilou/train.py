"""Hydra entry point for training: ``python -m lilou.train experiment=kernel_latency``.

The config tree lives in ``conf/`` (data, model, trainer, logger, experiment).
``task`` chooses the routine; each writes its metrics JSON and checkpoint into
the run's output folder (``outputs/<date>/<time>/`` or ``multirun/...``).
"""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from lilou.errors import LilouInputError, exit_on_input_error


def _tasks():
    from lilou.fusion.training import train_fusion_model
    from lilou.latency.kernel_model.training import train_kernel_model
    from lilou.research.e2e_task import train_e2e_calibration

    return {"kernel_latency": train_kernel_model, "fusion_gnn": train_fusion_model,
            "e2e_calibration": train_e2e_calibration}


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    return run(cfg)


@exit_on_input_error("lilou.train")
def run(cfg: DictConfig) -> float | None:
    """Bad input (an unknown op, GPU or setting) is one line on stderr and exit status 2, as in the CLI."""
    tasks = _tasks()
    if cfg.task not in tasks:
        raise LilouInputError(f"unknown task {cfg.task!r}; known: {', '.join(tasks)}")
    return tasks[cfg.task](cfg)


if __name__ == "__main__":
    main()
