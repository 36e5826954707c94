"""What one leave-one-GPU-out fold of the end-to-end evaluation fits without its held-out GPU: the per-kernel model
(trained, or read from a cache keyed by everything it depends on), the memory-bound fallback, the dispatch gap and
the roofline baseline; or, in-sample, the shipped parts."""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lilou.checkpoints import in_checkout
from lilou.data.kernel_table import cache_dir
from lilou.errors import LilouInputError
from lilou.latency.kernel_model.folds import KERNEL_FOLDS
from lilou.quiet import Log, log_to_stderr, quiet_lightning

REPO = Path(__file__).resolve().parents[3]
#: Fold checkpoints (git-ignored); an installed package's go to the cache folder ($LILOU_CACHE_DIR), not site-packages.
LOGO_DIR = REPO / "outputs" / "logo" if in_checkout() else cache_dir() / "logo"
#: Held-out GPU of the end-to-end labels -> (fold name, kernel-row GPUs held out with it).
FOLDS: dict[str, tuple[str, tuple[str, ...]]] = {gpus[0]: (fold, gpus) for fold, gpus in KERNEL_FOLDS.items()}


@dataclass
class FoldParts:
    """What one fold fits without its held-out GPU (or the shipped parts, in-sample)."""

    name: str
    kernel_model: Any          # lilou.latency.kernel_model.inference.KernelModel
    fallback: Any              # FallbackModel
    gap_ms: float
    roofline: Any              # RooflineBaseline
    trained_on: list[str]
    provenance: dict[str, Any]
    shipped_overhead: Any = None  # in-sample: the shipped OverheadModel


def kernel_config(held_out: Sequence[str], overrides: Sequence[str] = (), data_dir=None):
    if not (REPO / "conf").is_dir():
        raise LilouInputError("the leave-one-GPU-out evaluation trains fold models from the experiment configs of a "
                              "lilou source checkout (its conf/), which an installed package lacks; use --no-logo")
    from hydra import compose, initialize_config_dir

    extra = [f"data.held_out_gpus=[{','.join(held_out)}]", "trainer.enable_progress_bar=false",
             "output_checkpoint=null"]
    if data_dir is not None:
        extra.append(f"data.data_dir={Path(data_dir).resolve()}")
    # An ``experiment=...`` among the overrides replaces the shipped one (e.g. experiment=kernel_table).
    experiment = next((o for o in overrides if o.startswith("experiment=")), "experiment=kernel_latency")
    rest = [o for o in overrides if not o.startswith("experiment=")]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides=[experiment, *rest, *extra])


def fold_key(cfg, data_dir=None) -> str:
    """Hash of what a fold checkpoint depends on: config, feature/kernel-type lists, the data files."""
    from omegaconf import OmegaConf

    from lilou.data.neusight import kernel_files
    from lilou.latency.kernel_model.features import feature_names
    from lilou.latency.kernel_model.kernel_types import KERNEL_TYPES

    config = OmegaConf.to_container(cfg, resolve=False)
    config.pop("hydra", None)
    config.get("data", {}).pop("data_dir", None)  # where the data lives does not matter; the files do
    files = sorted((p.name, p.parent.name, p.stat().st_size) for p in kernel_files("train", data_dir=data_dir))
    payload = {"config": config, "kernel_types": list(KERNEL_TYPES),
               "features": feature_names(tuple(cfg.data.feature_groups)),
               "type_features": feature_names(tuple(cfg.data.type_feature_groups)), "files": files}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def logo_parts(held_out_gpu: str, overrides: Sequence[str] = (), data_dir=None, cache_dir: Path = LOGO_DIR,
               retrain: bool = False, log: Log = log_to_stderr) -> FoldParts:
    """The fold without ``held_out_gpu``: trained (or read from the cache) and fitted."""
    from lilou.latency.composition.calibrate import fit_floor_side
    from lilou.latency.kernel_model.inference import KernelModel
    from lilou.latency.evaluation.roofline import RooflineBaseline

    if held_out_gpu not in FOLDS:
        raise LilouInputError(f"no leave-one-GPU-out fold for {held_out_gpu}; folds: {', '.join(FOLDS)}")
    fold, held_out = FOLDS[held_out_gpu]
    cfg = kernel_config(held_out, overrides, data_dir)
    key = fold_key(cfg, data_dir)
    folder = Path(cache_dir) / fold / "kernel_latency"
    key_file = folder / "key.json"
    cached = (not retrain and key_file.exists() and json.loads(key_file.read_text()).get("key") == key
              and (folder / "model.safetensors").exists() and (folder / "roofline.json").exists())
    if not cached:
        from lilou.latency.kernel_model.training import fit

        started = time.perf_counter()
        log(f"fold {fold}: training the per-kernel model without {', '.join(held_out)} (cache {folder})")
        with quiet_lightning():
            predictor, datamodule = fit(cfg)
        if set(predictor.config["trained_on"]) & set(held_out):
            raise RuntimeError(f"fold {fold}: held-out GPU rows leaked into training")
        roofline = RooflineBaseline.fit(datamodule.train_rows)
        predictor.save(folder, {"held_out": list(held_out), "train_rows": len(datamodule.train_rows),
                                "seconds": round(time.perf_counter() - started, 1)})
        (folder / "roofline.json").write_text(json.dumps(
            {"floor_ms": roofline.floor_ms.tolist(), "efficiency": roofline.efficiency.tolist()}, indent=2) + "\n")
        key_file.write_text(json.dumps({"key": key, "held_out": list(held_out), "overrides": list(overrides)},
                                       indent=2) + "\n")
        log(f"fold {fold}: trained in {time.perf_counter() - started:.0f} s")
    kernel_model = KernelModel.load(folder)
    trained_on = sorted(kernel_model.config["trained_on"])
    if set(trained_on) & set(held_out):
        raise RuntimeError(f"fold checkpoint {folder} was trained on a held-out GPU")
    raw = json.loads((folder / "roofline.json").read_text())
    roofline = RooflineBaseline(np.asarray(raw["floor_ms"]), np.asarray(raw["efficiency"]))
    fallback, gap, _ = fit_floor_side(trained_on, data_dir)
    return FoldParts(name=fold, kernel_model=kernel_model, fallback=fallback, gap_ms=gap, roofline=roofline,
                     trained_on=trained_on,
                     provenance={"kernel_checkpoint": str(folder.relative_to(REPO) if folder.is_relative_to(REPO)
                                                          else folder),
                                 "key": key, "cached": cached, "held_out_kernel_rows": list(held_out)})


def shipped_parts(data_dir=None, log: Log = log_to_stderr) -> FoldParts:
    """In-sample: the shipped kernel checkpoint and overhead; the roofline fitted on all training rows."""
    from lilou.checkpoints import KERNEL_LATENCY, checkpoint_path
    from lilou.latency.composition.fallback import FallbackModel
    from lilou.latency.kernel_model.inference import KernelModel
    from lilou.latency.composition.overhead import E2E_OVERHEAD, OverheadModel, load_overhead

    kernel_model = KernelModel.load(checkpoint_path(KERNEL_LATENCY))
    params = load_overhead(checkpoint_path(E2E_OVERHEAD))
    trained_on = sorted(kernel_model.config["trained_on"])
    roofline = _cached_roofline(trained_on, data_dir, log)
    return FoldParts(name="shipped", kernel_model=kernel_model, fallback=FallbackModel(**params["fallback"]),
                     gap_ms=float(params["overhead"]["gap_ms"]), roofline=roofline, trained_on=trained_on,
                     provenance={"kernel_checkpoint": f"checkpoints/{KERNEL_LATENCY}",
                                 "overhead_checkpoint": f"checkpoints/{E2E_OVERHEAD}"},
                     shipped_overhead=OverheadModel(**params["overhead"]))


def _cached_roofline(trained_on: Sequence[str], data_dir, log: Log):
    from lilou.data.neusight import kernel_files, load_kernels
    from lilou.latency.kernel_model.dataset import build_dataset
    from lilou.latency.evaluation.roofline import RooflineBaseline

    files = sorted((p.name, p.parent.name, p.stat().st_size) for p in kernel_files("train", data_dir=data_dir))
    key = hashlib.sha256(json.dumps({"gpus": list(trained_on), "files": files}).encode()).hexdigest()[:16]
    path = LOGO_DIR / "all" / "roofline.json"
    if path.exists():
        raw = json.loads(path.read_text())
        if raw.get("key") == key:
            return RooflineBaseline(np.asarray(raw["floor_ms"]), np.asarray(raw["efficiency"]))
    log("fitting the roofline baseline on every training GPU's kernel rows")
    roofline = RooflineBaseline.fit(build_dataset(load_kernels("train", devices=trained_on, data_dir=data_dir)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "floor_ms": roofline.floor_ms.tolist(),
                                "efficiency": roofline.efficiency.tolist()}, indent=2) + "\n")
    return roofline
