"""Train the fusion GNN from a Hydra config; shared by `lilou.train` and the fusion benchmark."""
from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_only
import torch
from hydra.utils import instantiate, to_absolute_path
from omegaconf import DictConfig, OmegaConf

from lilou.fusion.benchmark import iter_labelled, score, tuned_rule_table
from lilou.fusion.datamodule import FusionDataModule
from lilou.fusion.dataset import HELD_OUT_SPLITS, ORACLE_VERSIONS, op_types_seen
from lilou.fusion.features import FEATURE_VERSION
from lilou.fusion.gnn_predictor import FusionPredictor
from lilou.fusion.rules import rule_partition
from lilou.runs import REPO, repo_relative, run_provenance, writable_folder


def provenance(data_root: str | Path) -> dict[str, Any]:
    """What a fusion checkpoint records of how it was made: :func:`lilou.runs.run_provenance` (the command, the
    commit, the data folder and the date), the data (repo-relative) and the feature and oracle versions of that
    data. Written to both config.json (read back by :meth:`FusionPredictor.load`, which checks ``feature_version``)
    and metrics.json."""
    return {**run_provenance(data_root, REPO), "data": repo_relative(data_root, REPO),
            "feature_version": FEATURE_VERSION, "oracle_versions": dict(ORACLE_VERSIONS)}


def fit(cfg: DictConfig, logger: Any = False) -> tuple[FusionPredictor, FusionDataModule]:
    L.seed_everything(cfg.seed, workers=True)
    if cfg.get("torch_threads"):
        torch.set_num_threads(int(cfg.torch_threads))
    datamodule: FusionDataModule = instantiate(cfg.data)
    datamodule.setup()
    module = instantiate(cfg.model)
    trainer: L.Trainer = instantiate(cfg.trainer, logger=logger)
    trainer.fit(module, datamodule=datamodule)
    architecture = {k: module.hparams[k] for k in ("hidden", "layers", "conv", "dropout")}
    config = {"architecture": architecture, "node_feature_mask": list(module.hparams.node_feature_mask or []),
              "edge_feature_mask": list(module.hparams.get("edge_feature_mask") or []),
              "backends": list(datamodule.backends),
              "trained_on": sorted({s.family for s in datamodule.samples["train"]}),
              "ops_seen": op_types_seen(datamodule.samples["train"], datamodule.root),
              "config": OmegaConf.to_container(cfg, resolve=False),
              **{k: v for k, v in provenance(datamodule.root).items() if k != "date"}}  # the date: metrics.json
    predictor = FusionPredictor.from_torch(module.net, config)
    return predictor, datamodule


def held_out_metrics(predictor: FusionPredictor, root: Path, backends: list[str], split: str = "test",
                     with_rules: bool = True) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    for backend in backends:
        graphs = list(iter_labelled(root, split, backend))
        entry = {"families": sorted({g.family for g in graphs}),
                 "gnn": score(graphs, lambda g, b=backend: predictor.predict(g, b))}
        if with_rules:
            table = tuned_rule_table(root, backend)
            entry["rules"] = score(graphs, lambda g, t=table: rule_partition(g, t))
        metrics[backend] = entry
    return metrics


def train_fusion_model(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    output_dir = Path(HydraConfig.get().runtime.output_dir)
    if cfg.get("output_checkpoint"):  # a bad path was found only after training, as a traceback
        writable_folder(to_absolute_path(cfg.output_checkpoint), "output_checkpoint")
    logger = instantiate(cfg.logger) if cfg.get("logger") else False
    predictor, datamodule = fit(cfg, logger=logger)
    if rank_zero_only.rank != 0:  # under DDP only the first process evaluates and writes
        return None
    backends = list(datamodule.backends)
    val = held_out_metrics(predictor, datamodule.root, backends, split="val", with_rules=False)
    test = held_out_metrics(predictor, datamodule.root, backends, split="test", with_rules=cfg.get("score_rules", True))
    # The corpus's held-out splits (leave-op-out, leave-exporter-setting-out), scored when they are built.
    held_out = {split: held_out_metrics(predictor, datamodule.root, backends, split=split, with_rules=False)
                for split in HELD_OUT_SPLITS if split != "test"}
    metrics: dict[str, Any] = {
        **provenance(datamodule.root),
        "data_note": "fusion graphs built by `make fusion-data`, labelled by the oracles",
        "seed": cfg.seed,
        "train_graphs": len(datamodule.samples["train"]),
        "train_splits": list(datamodule.train_splits),
        "val": val,
        "test": test,
        **{split.replace("-", "_"): m for split, m in held_out.items()},
        "python": platform.python_version(),
    }
    predictor.save(output_dir / "checkpoint", metrics)
    if cfg.get("output_checkpoint"):
        predictor.save(to_absolute_path(cfg.output_checkpoint), metrics)
    summary = {b: {k: round(v, 4) if isinstance(v, float) else v for k, v in m["gnn"].get("all", {}).items()}
               for b, m in test.items()}
    print(json.dumps(summary, indent=1))
    val_acc = [m["gnn"]["all"]["edge_accuracy"] for m in val.values() if m["gnn"]]
    return float(sum(val_acc) / len(val_acc)) if val_acc else None
