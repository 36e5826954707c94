"""The labelled workloads of the end-to-end evaluation: which NeuSight labels are tested, and each labelled
(model, seq, batch) exported from the zoo, read and grouped into kernels once for every fold (predicted, oracle
or no fusion)."""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lilou.checkpoints import in_checkout
from lilou.data.kernel_table import cache_dir
from lilou.errors import LilouInputError
from lilou.hardware import resolve_device
from lilou.quiet import Log, log_to_stderr

REPO = Path(__file__).resolve().parents[3]
#: Weight-free exports of the labelled models (shared with ``make fit-e2e``); an installed package's go to the cache
#: folder ($LILOU_CACHE_DIR), not site-packages.
MODELS_DIR = REPO / "datasets" / "e2e_models" if in_checkout() else cache_dir() / "e2e_models"
FUSION_MODES = ("predicted", "oracle", "none")


@dataclass
class Workload:
    """One labelled (model, seq, batch): its kernels, described once for every fold."""

    model: str
    seq: int
    batch: int
    kernels: Any              # GraphKernels
    source: str               # where the groups came from (gnn, rules, oracle, none)


def select_labels(data_dir=None, models: Sequence[str] | None = None, gpus: Sequence[str] | None = None):
    """(labels to report, labels of the evaluated models on every GPU); bad names are input errors."""
    from lilou.data.neusight import load_e2e

    # one name as a string is that name, not its letters ("no end-to-end labels for model(s) _, a, b, e, ...")
    models = [models] if isinstance(models, str) else models
    gpus = [gpus] if isinstance(gpus, str) else gpus
    labels = [label for label in load_e2e(data_dir) if not label.fusion]
    if not labels:
        raise LilouInputError("no eager end-to-end labels found under neusight/e2e")
    known_models = sorted({label.model for label in labels})
    if models:
        unknown = sorted(set(models) - set(known_models))
        if unknown:
            raise LilouInputError(f"no end-to-end labels for model(s) {', '.join(unknown)}; "
                                  f"labelled models: {', '.join(known_models)}")
        labels = [label for label in labels if label.model in set(models)]
    tested = labels
    if gpus:
        names = []
        for raw in gpus:
            name = resolve_device(raw.strip()).gpu
            if not any(label.gpu == name for label in labels):
                raise LilouInputError(f"no end-to-end labels for GPU {raw!r} (of the chosen models); labelled GPUs: "
                                      f"{', '.join(sorted({label.gpu for label in labels}))}")
            names.append(name)
        tested = [label for label in labels if label.gpu in names]
    return tested, labels


def partition_for(graph, path: Path, fusion: str):
    from lilou.fusion.partition import partition_from_groups

    if fusion == "predicted":
        from lilou.fusion.predict import predict_partition

        return predict_partition(graph, "eager")
    if fusion == "oracle":
        from lilou.fusion.backends.eager import eager_partition
        from lilou.graph.loading import load_onnx

        return eager_partition(load_onnx(path), graph)
    if fusion == "none":
        return partition_from_groups(graph, [[n] for n in graph.runtime_nodes()], "eager", source="none")
    raise LilouInputError(f"unknown fusion mode {fusion!r}; choose one of: {', '.join(FUSION_MODES)}")


def build_workloads(labels, fusion: str, models_dir: Path = MODELS_DIR, log: Log = log_to_stderr) -> dict:
    """(model, seq, batch) -> :class:`Workload`, exporting the models first where not cached."""
    from lilou.graph.dag import load_graph
    from lilou.latency.composition.calibrate import export_models
    from lilou.latency.composition.end_to_end import describe_kernels

    paths = export_models(labels, Path(models_dir))
    workloads = {}
    for model, seq, batch in sorted({(label.model, label.seq, label.batch) for label in labels}):
        started = time.perf_counter()
        graph = load_graph(paths[(model, seq)], batch=batch)
        partition = partition_for(graph, paths[(model, seq)], fusion)
        kernels = describe_kernels(graph, partition)
        workloads[(model, seq, batch)] = Workload(model, seq, batch, kernels, partition.source)
        log(f"  {model} seq {seq} batch {batch}: {len(kernels)} kernels ({partition.source}, "
            f"{time.perf_counter() - started:.1f} s)")
    return workloads
