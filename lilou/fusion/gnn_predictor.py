"""A trained fusion GNN on disk and in use: save, load (safetensors, no pickle), predict partitions.

Prediction runs in numpy (:mod:`lilou.fusion.gnn_numpy`) for the shipped
``gine`` architecture, so it needs no torch import; other architectures (the
ablations) run through torch.

For eager, the edges the view replay (:mod:`lilou.fusion.eager_replay`) puts in
one kernel stay fused whatever the GNN says (:data:`PRIOR_FLOOR_BACKENDS`): on
the training and validation families the replay never fused an edge the oracle
split (precision 1.0 over 9,778 edges), while the GNN, which has seen few views
read by several slices of one kernel, sometimes splits them. TVM's replay is not
used so (precision 0.997 on the training families).

An op Lilou does not support (a custom domain op, say) is never fused with its
neighbours by the GNN: nothing is known of how a runtime would run it, so it is
predicted as its own kernel, with the fallback latency and a warning. Nor, in eager,
is a recurrent layer (:func:`lilou.fusion.eager_replay.recurrent_layer_boundaries`).
"""
from __future__ import annotations

from dataclasses import replace
import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file

from lilou.blas import blas_section
from lilou.checkpoints import FUSION_GNN, looks_like, make_remedy
from lilou.errors import LilouInputError, MissingDataError
from lilou.fusion.features import (
    FEATURE_VERSION,
    FUSION_EDGE_FEATURES,
    FUSION_NODE_FEATURES,
    PRIOR_COLUMNS,
    FusionArrays,
    backend_index,
    fusion_arrays,
    with_backend_prior,
)
from lilou.fusion.eager_replay import eager_partition_from_fused_edges, recurrent_layer_boundaries
from lilou.fusion.gnn_numpy import edge_logits
from lilou.fusion.partition import Partition, partition_from_fused_edges
from lilou.graph.dag import ModelGraph


#: Backends whose replay prior is a floor on the predicted fusion (see the module docstring).
PRIOR_FLOOR_BACKENDS: tuple[str, ...] = ("eager",)


class StaleFusionCheckpointWarning(UserWarning):
    """A fusion checkpoint trained on features of another version than this code computes (or of no recorded
    version): its inputs are defined differently from those it learned from. The tests turn it into an error."""


def feature_version_mismatch(config: dict[str, Any]) -> str | None:
    """Why a checkpoint's recorded feature version (``config["feature_version"]``) is not this code's, or None."""
    recorded = config.get("feature_version")
    if recorded is None:
        return (f"records no feature version (it was trained before checkpoints recorded one), so it cannot be "
                f"checked against the version {FEATURE_VERSION} features this code computes")
    if str(recorded) != FEATURE_VERSION:
        return f"was trained on features of version {recorded}, but this code computes version {FEATURE_VERSION}"
    return None


#: What a fusion GNN checkpoint's weights must hold: the input layers whose widths are checked against the features.
REQUIRED_WEIGHTS = ("node_in.0.weight", "edge_in.0.weight")


def _missing_parts(config: Any, weights: dict[str, np.ndarray]) -> str:
    """What a folder read as a fusion GNN checkpoint lacks of one ("" when nothing): the architecture in its
    config.json, the input layers in its weights."""
    if not isinstance(config, dict):
        return "its config.json is not a JSON object"
    if not isinstance(config.get("architecture"), dict) or "layers" not in config["architecture"]:
        return "its config.json has no architecture (with layers)"
    absent = [name for name in REQUIRED_WEIGHTS if name not in weights]
    return f"its model.safetensors has no {', '.join(absent)}" if absent else ""


class FusionPredictor:
    def __init__(self, weights: dict[str, np.ndarray], config: dict[str, Any], threshold: float = 0.5) -> None:
        self.weights = {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in weights.items()}
        self.config = config
        self.threshold = threshold
        self.feature_mask = np.ones(FUSION_NODE_FEATURES, dtype=np.float32)
        for i in config.get("node_feature_mask") or []:
            self.feature_mask[i] = 0.0
        self.edge_feature_mask = np.ones(FUSION_EDGE_FEATURES, dtype=np.float32)
        for i in config.get("edge_feature_mask") or []:
            self.edge_feature_mask[i] = 0.0
        self._torch_net = None

    @property
    def architecture(self) -> dict[str, Any]:
        return self.config["architecture"]

    @classmethod
    def from_torch(cls, net, config: dict[str, Any]) -> FusionPredictor:
        weights = {k: v.detach().cpu().numpy() for k, v in net.state_dict().items()}
        predictor = cls(weights, config)
        predictor._torch_net = net.eval()
        return predictor

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> FusionPredictor:
        folder = Path(folder)
        try:
            config = json.loads((folder / "config.json").read_text())
            weights = load_file(folder / "model.safetensors")
        except FileNotFoundError as exc:
            raise MissingDataError(f"no fusion checkpoint in {folder} ({exc.filename} missing); "
                                   f"train one with {make_remedy('`make train-fusion`')}") from None
        missing = _missing_parts(config, weights)
        if missing:  # a kernel checkpoint copied here was `KeyError: 'node_in.0.weight'` (audit ua43d, finding 6)
            raise LilouInputError(f"{folder} is not a fusion GNN checkpoint: {missing}{looks_like(folder, config, FUSION_GNN)}; "
                                  f"train one with {make_remedy('`make fusion-data && make train-fusion`')}")
        node_in, edge_in = weights["node_in.0.weight"].shape[1], weights["edge_in.0.weight"].shape[1]
        if (node_in, edge_in) != (FUSION_NODE_FEATURES, FUSION_EDGE_FEATURES):
            raise MissingDataError(
                f"fusion checkpoint {folder} was trained on {node_in} node / {edge_in} edge features, but this "
                f"version computes {FUSION_NODE_FEATURES} / {FUSION_EDGE_FEATURES}: retrain it with "
                f"{make_remedy('`make train-fusion`')}")
        stale = feature_version_mismatch(config)
        if stale:
            warnings.warn(f"fusion checkpoint {folder} {stale}; its predictions may be off: retrain it "
                          f"({make_remedy('`make fusion-data && make train-fusion`')})", StaleFusionCheckpointWarning,
                          stacklevel=2)
        return cls(weights, config)

    @classmethod
    def load_shipped(cls) -> FusionPredictor:
        """The GNN of the checkpoint root as ``LILOU_CHECKPOINTS`` sets it now (read once per folder:
        :func:`lilou.fusion.predict.shipped_gnn`)."""
        from lilou.fusion.predict import shipped_gnn

        return shipped_gnn("gnn")

    def save(self, folder: str | os.PathLike[str], metrics: dict[str, Any] | None = None) -> Path:
        from safetensors.numpy import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: np.ascontiguousarray(v) for k, v in self.weights.items()}, folder / "model.safetensors")
        (folder / "config.json").write_text(json.dumps(self.config, indent=1, default=str) + "\n")
        if metrics is not None:
            (folder / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str) + "\n")
        return folder

    def edge_probabilities(self, arrays: FusionArrays, backend: str) -> np.ndarray:
        x = arrays.x * self.feature_mask
        arrays = replace(arrays, edge_attr=with_backend_prior(arrays.edge_attr, backend) * self.edge_feature_mask)
        if self.architecture.get("conv", "gine") == "gine":
            with blas_section():  # lilou.blas: OpenBLAS hangs under calls from several threads
                logits = edge_logits(self.weights, self.architecture["layers"], x, arrays.edge_index,
                                     arrays.edge_attr, backend_index(backend))
        else:
            logits = self._torch_logits(x, arrays, backend)
        return 0.5 * (1.0 + np.tanh(0.5 * logits))  # the logistic function, without overflow

    def _torch_logits(self, x: np.ndarray, arrays: FusionArrays, backend: str) -> np.ndarray:
        import torch

        from lilou.fusion.gnn import FusionGNN

        if self._torch_net is None:
            net = FusionGNN(FUSION_NODE_FEATURES, FUSION_EDGE_FEATURES, **self.architecture)
            net.load_state_dict({k: torch.from_numpy(v) for k, v in self.weights.items()})
            self._torch_net = net.eval()
        with torch.no_grad():
            logits = self._torch_net(torch.from_numpy(x), torch.from_numpy(arrays.edge_index),
                                     torch.from_numpy(arrays.edge_attr), torch.tensor([backend_index(backend)]),
                                     torch.zeros(x.shape[0], dtype=torch.long))
        return logits.numpy()

    def predict(self, graph: ModelGraph, backend: str) -> Partition:
        arrays = fusion_arrays(graph)
        probabilities = self.edge_probabilities(arrays, backend)
        unsupported = {n for n, data in graph.dag.nodes(data=True) if not data["supported"]}
        if unsupported:
            probabilities[[u in unsupported or v in unsupported for u, v in arrays.edge_names]] = 0.0
        if backend in PRIOR_FLOOR_BACKENDS:
            column = PRIOR_COLUMNS[backend]
            probabilities = np.maximum(probabilities, arrays.edge_attr[:, column] * self.edge_feature_mask[column])
        if backend == "eager":
            boundaries = recurrent_layer_boundaries(graph)
            if boundaries:
                probabilities[[edge in boundaries for edge in arrays.edge_names]] = 0.0
        probabilities = probabilities.tolist()
        scores = {edge: p for edge, p, runtime in zip(arrays.edge_names, probabilities, arrays.edge_mask.tolist())
                  if runtime}
        fused = [edge for edge, p in scores.items() if p >= self.threshold]
        if backend == "eager":
            return eager_partition_from_fused_edges(graph, fused, source="gnn", scores=scores)
        return partition_from_fused_edges(graph, fused, backend, source="gnn", scores=scores)
