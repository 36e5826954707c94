"""Predicted kernel groups for a graph and backend: the default path of ``lilou fuse``.

Uses the trained fusion GNN when its checkpoint is present, else the rule
baseline (tuned table when shipped, hand-written defaults otherwise). Either way
op types the models never saw are named in the partition's warnings.
"""
from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from lilou.checkpoints import (FUSION_GNN, FUSION_RULES, FusionCheckpoints, folder_kind, looks_like, missing_checkpoint,
                               reading_checkpoints)
from lilou.errors import LilouInputError
from lilou.fusion.backends import check_backend
from lilou.fusion.partition import Partition
from lilou.fusion.rules import RuleTable, rule_partition
from lilou.graph.dag import ModelGraph
from lilou.graph.features import OP_VOCABULARY

if TYPE_CHECKING:
    from lilou.fusion.gnn_predictor import FusionPredictor


def rule_table(backend: str, checkpoints: FusionCheckpoints | None = None) -> RuleTable:
    """The tuned rule table of ``backend`` in ``checkpoints`` (default: :meth:`FusionCheckpoints.current`), or the
    hand-written defaults where it has none."""
    path = (checkpoints or FusionCheckpoints.current()).rules / f"{backend}.json"
    return _rule_table_at(backend, path, _stamp(path))


@functools.lru_cache(maxsize=8)
def _rule_table_at(backend: str, path: Path, stamp: tuple) -> RuleTable:
    if not path.exists():
        config = _config(path.parent)
        if folder_kind(path.parent, config) not in (None, FUSION_RULES):  # a kernel checkpoint here fused by defaults
            raise LilouInputError(f"{path.parent} is not a folder of fusion rule tables: it has no {path.name}"
                                  f"{looks_like(path.parent, config)}; tune them with `make train-fusion`")
        return RuleTable(backend)
    with reading_checkpoints(path):
        return RuleTable.load(path, backend)


def _config(folder: Path) -> object:
    """``folder``'s config.json, or None where it has none or it does not parse."""
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None


def _stamp(*paths: Path) -> tuple:
    """What the caches of loaded checkpoints are keyed by besides the path: each file's size and modification time,
    so a checkpoint rewritten in place (``make train-fusion``) is read again, not served from before."""
    stamps = []
    for path in paths:
        try:
            stat = path.stat()
            stamps.append((stat.st_size, stat.st_mtime_ns))
        except OSError:
            stamps.append(None)
    return tuple(stamps)


def unknown_ops(graph: ModelGraph, known: Iterable[str] = OP_VOCABULARY) -> list[str]:
    known = set(known)
    return sorted({graph.dag.nodes[n]["op"] for n in graph.runtime_nodes()} - known)


def shipped_gnn(method: str = "auto", checkpoints: FusionCheckpoints | None = None) -> FusionPredictor | None:
    """The fusion GNN of ``checkpoints`` (default: :meth:`FusionCheckpoints.current`; read once per folder and
    version), or None where ``method`` asks for rules or no GNN checkpoint is installed (an error when ``method`` is
    "gnn")."""
    gnn_folder = (checkpoints or FusionCheckpoints.current()).gnn
    if method == "gnn" and not gnn_folder.exists():
        raise missing_checkpoint(FUSION_GNN, gnn_folder)
    if method not in ("auto", "gnn") or not gnn_folder.exists():
        return None
    return _gnn_at(gnn_folder, _stamp(gnn_folder / "config.json", gnn_folder / "model.safetensors"))


@functools.lru_cache(maxsize=4)
def _gnn_at(folder: Path, stamp: tuple) -> FusionPredictor:
    from lilou.fusion.gnn_predictor import FusionPredictor  # numpy weights, read on demand

    with reading_checkpoints(folder):
        return FusionPredictor.load(folder)


def predict_partition(graph: ModelGraph, backend: str = "eager", method: str = "auto",
                      checkpoints: FusionCheckpoints | None = None) -> Partition:
    """Kernel groups predicted from the ONNX graph alone (``method``: auto, gnn or rules; ``backend`` in any case),
    with the fusion models of ``checkpoints`` (default: :meth:`FusionCheckpoints.current`)."""
    backend = check_backend(backend)
    checkpoints = checkpoints or FusionCheckpoints.current()
    known: Iterable[str] = OP_VOCABULARY
    predictor = shipped_gnn(method, checkpoints)
    if predictor is not None:
        partition = predictor.predict(graph, backend)
        # Ops outside the one-hot vocabulary that training graphs of this backend held were learned from (as a
        # generic op); a checkpoint that does not list them falls back to the vocabulary.
        known = predictor.config.get("ops_seen", {}).get(backend, OP_VOCABULARY)
    else:
        partition = rule_partition(graph, rule_table(backend, checkpoints))
    if backend != "eager":  # eager's partitions silence its views themselves (eager_replay)
        partition = _own_type_casts_silenced(graph, partition)
    unknown = unknown_ops(graph, known)
    if unknown:
        partition.warnings.append(f"op(s) the fusion model never saw: {', '.join(unknown)}; "
                                  "they are treated as a generic op")
    return partition


def _own_type_casts_silenced(graph: ModelGraph, partition: Partition) -> Partition:
    """``partition`` with every kernel made only of casts to their own type launching nothing, as TVM elides them
    (its oracle's "view" groups): a quantized file's stand-in for a UINT8 input (:mod:`lilou.graph.quantized`) was a
    memory-bound kernel of its own under ``--backend tvm``, which doubled a one-matmul graph (0.0617 ms on an H100
    against eager's 0.0315)."""
    from lilou.fusion.eager_layout import casts_to_its_own_type
    from lilou.fusion.partition import KernelGroup

    data = graph.dag.nodes
    silenced = [i for i, g in enumerate(partition.groups)
                if g.launches and all(data[n]["op"] == "Cast" and casts_to_its_own_type(data[n]) for n in g.nodes)]
    if not silenced:
        return partition
    groups = list(partition.groups)
    for i in silenced:
        groups[i] = KernelGroup(groups[i].nodes, launches=False, reason="view")
    return Partition(backend=partition.backend, groups=groups, source=partition.source,
                     warnings=list(partition.warnings))

