"""Fusion oracles: ground-truth kernel groups per backend (see DESIGN.md, "Backends").

The names of the backends live here, apart from the oracles and the models, so that checking one
imports nothing heavy (``Predictor()`` checks its backend before any graph is read).
"""
from __future__ import annotations

from lilou.errors import LilouInputError

#: The runtimes whose kernels Lilou predicts, in the order of the fusion GNN's backend embedding.
BACKENDS: tuple[str, ...] = ("eager", "tvm")


def check_backend(backend: str) -> str:
    """The backend's name as :data:`BACKENDS` spells it; any case is taken, as for precisions and GPU names."""
    name = backend.strip().lower() if isinstance(backend, str) else backend
    if name not in BACKENDS:
        raise LilouInputError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    return name
