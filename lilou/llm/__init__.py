"""Decoder-LLM serving: prefill/decode composition on the kernel model, power and memory fit (``lilou llm``).

Imports are lazy so ``lilou llm --list`` and the CLI's argument checks stay light.
"""
from __future__ import annotations

__all__ = ["LLMPrediction", "LLMPredictor", "builtin_models"]


def __getattr__(name: str):
    if name in ("LLMPredictor", "LLMPrediction"):
        from lilou.llm import predictor

        return getattr(predictor, name)
    if name == "builtin_models":
        from lilou.llm.config import builtin_models

        return builtin_models
    raise AttributeError(f"module 'lilou.llm' has no attribute {name!r}")
