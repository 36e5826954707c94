"""Hydra entry point for training: ``python -m lilou.train experiment=kernel_latency``.

The config tree lives in ``conf/`` (data, model, trainer, logger, experiment).
``task`` chooses the routine; each writes its metrics JSON and checkpoint into
the run's output folder (``outputs/<date>/<time>/`` or ``multirun/...``) and only there, unless
``output_checkpoint=checkpoints/...`` asks it to replace a shipped folder too (``make train-kernels``,
``make train-fusion``; refused in a sweep).
"""
from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from lilou.errors import LilouInputError, exit_on_input_error, run_hydra_main


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
    check_output_checkpoint(cfg.get("output_checkpoint"), multirun=_multirun())
    return tasks[cfg.task](cfg)


def _multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except ValueError:  # no Hydra run (a config composed by a script)
        return False


def check_output_checkpoint(output_checkpoint: str | None, multirun: bool) -> None:
    """A sweep (``-m``) whose ``output_checkpoint`` is a shipped folder is refused before any job trains: every job
    would overwrite the same folder under checkpoints/, the last one winning (the README's sweep did so when the
    experiments set it). A single run replaces a shipped folder only when told to (``make train-kernels``)."""
    if not multirun or not output_checkpoint:
        return
    from hydra.utils import to_absolute_path

    from lilou.checkpoints import SHIPPED_ROOT

    target = Path(to_absolute_path(str(output_checkpoint))).resolve()
    if target == SHIPPED_ROOT.resolve() or SHIPPED_ROOT.resolve() in target.parents:
        raise LilouInputError(f"output_checkpoint={output_checkpoint} in a sweep (-m): every job would overwrite "
                              f"{target}, the last one winning; drop it (each job writes its own "
                              "multirun/<date>/<time>/<job>/checkpoint) and ship the one you pick with a single run "
                              "(make train-kernels / make train-fusion)")


if __name__ == "__main__":
    run_hydra_main(main, "lilou.train")
