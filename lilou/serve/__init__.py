"""``lilou serve``: the HTTP prediction service and its web page (FastAPI; a thin layer over lilou.api).

>>> from lilou.serve import create_app
>>> app = create_app(models_root="models", max_upload_mb=256)   # doctest: +SKIP

``create_app`` is imported on first use, so ``python -m lilou.serve.openapi_doc`` runs cleanly.
"""
from __future__ import annotations

__all__ = ["create_app"]


def __getattr__(name: str):
    if name == "create_app":
        from lilou.serve.app import create_app

        return create_app
    raise AttributeError(f"module 'lilou.serve' has no attribute {name!r}")
