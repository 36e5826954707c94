"""Ground-truth kernel groups from a backend's oracle (``lilou fuse --oracle``, the fusion dataset)."""
from __future__ import annotations

import os

from lilou.errors import LilouInputError
from lilou.fusion.partition import Partition
from lilou.graph.dag import ModelGraph
from lilou.graph.loading import load_onnx


def oracle_partition(backend: str, model_path: str | os.PathLike[str], graph: ModelGraph,
                     strict: bool = False) -> Partition:
    """The oracle's kernel groups. ``strict`` (the fusion dataset) refuses a TVM labelling that could not map
    every kernel back to ONNX nodes: such a label would call real kernels "no kernel"."""
    if backend == "eager":
        from lilou.fusion.backends.eager import eager_partition

        return eager_partition(load_onnx(model_path), graph)
    if backend == "tvm":
        from lilou.fusion.backends.tvm import tvm_partition_with_stats

        partition, stats = tvm_partition_with_stats(model_path, graph)
        if strict and stats.untagged_kernels:
            raise ValueError(f"{stats.untagged_kernels} of {stats.kernels_tvm} TVM kernels map to no ONNX node")
        return partition
    raise LilouInputError(f"no oracle for backend {backend!r}")
