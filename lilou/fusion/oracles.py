"""Ground-truth kernel groups from a backend's oracle (``lilou fuse --oracle``, the fusion dataset)."""
from __future__ import annotations

import os

from lilou.errors import LilouInputError
from lilou.fusion.partition import Partition
from lilou.graph.dag import ModelGraph
from lilou.graph.loading import load_onnx


def oracle_partition(backend: str, model_path: str | os.PathLike[str], graph: ModelGraph) -> Partition:
    if backend == "eager":
        from lilou.fusion.backends.eager import eager_partition

        return eager_partition(load_onnx(model_path), graph)
    if backend == "tvm":
        from lilou.fusion.backends.tvm import tvm_partition

        return tvm_partition(model_path, graph)
    raise LilouInputError(f"no oracle for backend {backend!r}")
