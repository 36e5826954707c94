"""ModelGraph -> torch_geometric ``Data`` (features from :mod:`lilou.graph.features`)."""
from __future__ import annotations

import torch
from torch_geometric.data import Data

from lilou.graph.dag import ModelGraph
from lilou.graph.features import (  # noqa: F401 - re-exported for callers of the PyG view
    NUM_EDGE_FEATURES,
    NUM_NODE_FEATURES,
    NUM_NODE_SCALARS,
    OP_VOCABULARY,
    graph_arrays,
    op_index,
)


def to_pyg(graph: ModelGraph) -> Data:
    """Convert to a PyG ``Data`` (x, edge_index, edge_attr, node_names)."""
    arrays = graph_arrays(graph)
    return Data(x=torch.from_numpy(arrays.x), edge_index=torch.from_numpy(arrays.edge_index),
                edge_attr=torch.from_numpy(arrays.edge_attr), node_names=arrays.node_names,
                num_nodes=len(arrays.node_names))
