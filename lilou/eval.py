"""Hydra entry point for evaluation: ``python -m lilou.eval experiment=fusion_gnn checkpoint=DIR``.

Scores a trained checkpoint (default: the shipped one) on the held-out data its
experiment defines and writes ``metrics.json`` into the run folder
(``outputs/eval/<date>/<time>/``). Use it on the checkpoints a sweep wrote to
``multirun/``. End-to-end evaluation against measured labels is ``lilou eval``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import hydra
from hydra.utils import instantiate, to_absolute_path
from omegaconf import DictConfig

from lilou.checkpoints import checkpoint_path
from lilou.errors import LilouInputError, MissingDataError, exit_on_input_error


def _checkpoint(cfg: DictConfig) -> Path:
    return Path(to_absolute_path(cfg.checkpoint)) if cfg.get("checkpoint") else checkpoint_path(cfg.task)


def evaluate_fusion(cfg: DictConfig) -> dict[str, Any]:
    from lilou.fusion.gnn_predictor import FusionPredictor
    from lilou.fusion.training import held_out_metrics

    datamodule = instantiate(cfg.data)
    if not any(Path(datamodule.root).glob("*/*.onnx")):  # scoring nothing gave empty metrics and exit 0
        raise MissingDataError(f"no labelled fusion graphs under {datamodule.root} (data.root is relative to the "
                               "folder you run from: the repository root, or give an absolute path); build them with "
                               "`make fusion-data`")
    predictor = FusionPredictor.load(_checkpoint(cfg))
    return held_out_metrics(predictor, datamodule.root, list(datamodule.backends), split=cfg.split)


def evaluate_kernels(cfg: DictConfig) -> dict[str, Any]:
    from lilou.latency.kernel_model.predictor import KernelLatencyPredictor
    from lilou.latency.kernel_model.training import held_out_metrics

    predictor = KernelLatencyPredictor.load(_checkpoint(cfg))
    datamodule = instantiate(cfg.data)
    datamodule.setup()
    return {"held_out_gpus": list(cfg.data.get("held_out_gpus") or []),
            "rows": held_out_metrics(predictor, datamodule)}


TASKS = {"fusion_gnn": evaluate_fusion, "kernel_latency": evaluate_kernels}


@hydra.main(version_base="1.3", config_path="../conf", config_name="eval")
def main(cfg: DictConfig) -> None:
    run(cfg)


@exit_on_input_error("lilou.eval")
def run(cfg: DictConfig) -> None:
    """Bad input (a missing checkpoint, an unknown GPU) is one line on stderr and exit status 2, as in the CLI."""
    from hydra.core.hydra_config import HydraConfig

    if cfg.task not in TASKS:
        raise LilouInputError(f"no evaluation for task {cfg.task!r}; known: {', '.join(TASKS)}")
    metrics = {"task": cfg.task, "checkpoint": str(_checkpoint(cfg)), "result": TASKS[cfg.task](cfg)}
    out = Path(HydraConfig.get().runtime.output_dir) / "metrics.json"
    out.write_text(json.dumps(metrics, indent=1, default=str) + "\n")
    print(json.dumps(metrics, indent=1, default=str)[:4000])
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
