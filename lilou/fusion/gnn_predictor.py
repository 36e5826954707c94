"""A trained fusion GNN on disk and in use: save, load (safetensors, no pickle), predict partitions."""
from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from lilou.checkpoints import FUSION_GNN, checkpoint_path
from lilou.fusion.features import FUSION_EDGE_FEATURES, FUSION_NODE_FEATURES, backend_index, fusion_data
from lilou.fusion.gnn import FusionGNN
from lilou.fusion.partition import Partition, partition_from_fused_edges
from lilou.graph.dag import ModelGraph


class FusionPredictor:
    def __init__(self, net: FusionGNN, config: dict[str, Any], threshold: float = 0.5) -> None:
        self.net = net.eval()
        self.config = config
        self.threshold = threshold
        self.feature_mask = torch.ones(FUSION_NODE_FEATURES)
        for i in config.get("node_feature_mask") or []:
            self.feature_mask[i] = 0.0

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> FusionPredictor:
        folder = Path(folder)
        config = json.loads((folder / "config.json").read_text())
        net = FusionGNN(FUSION_NODE_FEATURES, FUSION_EDGE_FEATURES, **config["architecture"])
        net.load_state_dict(load_file(folder / "model.safetensors"))
        return cls(net, config)

    @classmethod
    @functools.lru_cache(maxsize=1)
    def load_shipped(cls) -> FusionPredictor:
        return cls.load(checkpoint_path(FUSION_GNN))

    def save(self, folder: str | os.PathLike[str], metrics: dict[str, Any] | None = None) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.net.state_dict().items()}, folder / "model.safetensors")
        (folder / "config.json").write_text(json.dumps(self.config, indent=1, default=str) + "\n")
        if metrics is not None:
            (folder / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str) + "\n")
        return folder

    @torch.no_grad()
    def edge_probabilities(self, data, backend: str) -> torch.Tensor:
        batch = torch.zeros(data.num_nodes, dtype=torch.long)
        backend_ids = torch.tensor([backend_index(backend)])
        logits = self.net(data.x * self.feature_mask, data.edge_index, data.edge_attr, backend_ids, batch)
        return torch.sigmoid(logits)

    def predict(self, graph: ModelGraph, backend: str) -> Partition:
        data = fusion_data(graph)
        probabilities = self.edge_probabilities(data, backend).tolist()
        scores = {edge: p for edge, p, runtime in zip(data.edge_names, probabilities, data.edge_mask.tolist())
                  if runtime}
        fused = [edge for edge, p in scores.items() if p >= self.threshold]
        return partition_from_fused_edges(graph, fused, backend, source="gnn", scores=scores)
