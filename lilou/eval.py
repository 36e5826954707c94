"""Hydra entry point for evaluation: ``python -m lilou.eval experiment=fusion_gnn checkpoint=DIR``.

Scores a trained checkpoint (default: the shipped one) on the held-out data its
experiment defines and writes ``metrics.json`` into the run folder
(``outputs/eval/<date>/<time>/``). Use it on the checkpoints a sweep wrote to
``multirun/``. End-to-end evaluation against measured labels is ``lilou eval``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from hydra.utils import instantiate, to_absolute_path
from omegaconf import DictConfig

from lilou.checkpoints import checkpoint_path
from lilou.errors import LilouInputError, MissingDataError, exit_on_input_error, run_hydra_main


def _checkpoint(cfg: DictConfig) -> Path:
    """``checkpoint``, else the one the experiment ships (its ``output_checkpoint``: ``experiment=
    kernel_latency_tensor`` scored checkpoints/kernel_latency, the FP32 NeuSight model, at 263 % on H200 GEMMs), else
    the shipped model trained on the experiment's data (the kernel table: kernel_latency_tensor), else the task's."""
    if cfg.get("checkpoint"):
        return Path(to_absolute_path(cfg.checkpoint))
    shipped = cfg.get("output_checkpoint")
    if shipped:
        path = Path(shipped)
        if len(path.parts) == 2 and path.parts[0] == "checkpoints":  # honours LILOU_CHECKPOINTS
            return checkpoint_path(path.name)
        return Path(to_absolute_path(shipped))
    if cfg.task == "kernel_latency" and str(cfg.data.get("_target_", "")).endswith("KernelTableDataModule"):
        return checkpoint_path("kernel_latency_tensor")
    return checkpoint_path(cfg.task)


def fusion_in_sample(config: dict[str, Any], root: Path, split: str) -> list[str]:
    """The families of ``split`` under ``root`` that a fusion checkpoint (its ``config``) trained on: those in its
    ``trained_on`` when the split is one of the ``data.train_splits`` it recorded (or it recorded none). A corpus
    family (``op-<op>``) spans splits by exporter setting, so a split it did not train on is not in-sample
    although the family name is in ``trained_on``."""
    from lilou.fusion.dataset import exporter_of, split_of

    trained_on = set(config.get("trained_on") or [])
    splits = ((config.get("config") or {}).get("data") or {}).get("train_splits")
    families = set()
    for path in root.glob("*/*.onnx"):
        of = split_of(path.parent.name, exporter_of(path))
        if (split == "all" or of == split) and (splits is None or of in splits):
            families.add(path.parent.name)
    return sorted(families & trained_on)


def evaluate_fusion(cfg: DictConfig) -> dict[str, Any]:
    from lilou.fusion.dataset import SPLITS, check_split, exporter_of, split_of
    from lilou.fusion.gnn_predictor import FusionPredictor
    from lilou.fusion.training import held_out_metrics

    split = check_split(str(cfg.split))  # a misspelt split scored no graph: empty metrics, exit 0
    datamodule = instantiate(cfg.data)
    if not any(Path(datamodule.root).glob("*/*.onnx")):  # scoring nothing gave empty metrics and exit 0
        raise MissingDataError(f"no labelled fusion graphs under {datamodule.root} (data.root is relative to the "
                               "folder you run from: the repository root, or give an absolute path); build them with "
                               "`make fusion-data`")
    present = {split_of(path.parent.name, exporter_of(path)) for path in Path(datamodule.root).glob("*/*.onnx")}
    if split != "all" and split not in present:  # a partial dataset: empty metrics, exit 0
        raise MissingDataError(f"no fusion graphs of split {split} under {datamodule.root} (it holds "
                               f"{', '.join(s for s in SPLITS if s in present)}); build them with `make fusion-data`")
    checkpoint = _checkpoint(cfg)
    predictor = FusionPredictor.load(checkpoint)
    # The shipped GNN learns from every split but val: its test scores were reported as held-out, 100 %, unmarked.
    seen = fusion_in_sample(predictor.config, Path(datamodule.root), split)
    if seen and not cfg.get("in_sample"):
        shown = ", ".join(seen[:6]) + (f" and {len(seen) - 6} more" if len(seen) > 6 else "")
        raise LilouInputError(
            f"checkpoint {checkpoint} was trained on families of split {split} ({shown}): its scores there are "
            "in-sample, not held-out; score split=val, or a checkpoint trained with that split held out (python -m "
            "lilou.train experiment=fusion_gnn_heldout, then checkpoint=<run>/checkpoint), or set in_sample=true to "
            "score them in-sample on purpose")
    metrics = held_out_metrics(predictor, datamodule.root, list(datamodule.backends), split=split)
    if seen:
        print(f"lilou.eval: warning: IN-SAMPLE: the checkpoint trained on {len(seen)} famil"
              f"{'y' if len(seen) == 1 else 'ies'} of split {split}; these scores are not held-out figures",
              file=sys.stderr)
        for entry in metrics.values():
            entry["in_sample"] = True
            entry["in_sample_families"] = sorted(set(entry.get("families", [])) & set(seen))
    return {"split": split, "in_sample_families": seen, **metrics}


def evaluate_kernels(cfg: DictConfig) -> dict[str, Any]:
    from lilou.latency.kernel_model.predictor import KernelLatencyPredictor
    from lilou.latency.kernel_model.training import held_out_metrics

    if not cfg.data.get("held_out_gpus") and not cfg.data.get("held_out_architectures"):  # was "rows": [], exit 0
        raise LilouInputError("data.held_out_gpus is empty, so there is nothing to score: name the GPUs the checkpoint "
                              "did not train on, e.g. 'data.held_out_gpus=[t4]'")
    checkpoint = _checkpoint(cfg)
    predictor = KernelLatencyPredictor.load(checkpoint)
    datamodule = instantiate(cfg.data)
    datamodule.setup()
    trained_on = set(predictor.config.get("trained_on") or [])
    seen = sorted(trained_on & {str(g) for g in np.unique(datamodule.test_rows.gpu)})
    if seen and not cfg.get("in_sample"):
        raise LilouInputError(
            f"checkpoint {checkpoint} was trained on {', '.join(seen)}, which the held-out set names: its errors there "
            "are in-sample, not held-out; train with them held out (python -m lilou.train ... "
            f"'data.held_out_gpus=[{','.join(seen)}]') and pass checkpoint=<run>/checkpoint, or set in_sample=true "
            "to score them in-sample on purpose")
    rows = held_out_metrics(predictor, datamodule)
    if seen:
        print(f"lilou.eval: warning: IN-SAMPLE: the checkpoint trained on {', '.join(seen)}; these rows are not "
              "held-out figures", file=sys.stderr)
        for row in rows:
            row["in_sample"] = row.get("gpu") in seen
    return {"held_out_gpus": list(datamodule.held_out_gpus), "in_sample_gpus": seen, "rows": rows}


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
    run_hydra_main(main, "lilou.eval")
