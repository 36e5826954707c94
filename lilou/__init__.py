"""Lilou: predict how long an ONNX model takes to run inference on an NVIDIA GPU or MIG slice."""

__version__ = "0.1.0"

__all__ = ["LLMPredictor", "LilouInputError", "Predictor"]


def __getattr__(name: str):
    # Lazy: `import lilou` stays light; the API (numpy, onnx, networkx) loads on first use.
    if name == "Predictor":
        from lilou.api import Predictor

        return Predictor
    if name == "LLMPredictor":  # prefill, decode, power and memory fit of a decoder LLM (docs/llm.md)
        from lilou.llm import LLMPredictor

        return LLMPredictor
    if name == "LilouInputError":  # what every call raises for bad input, its message one line
        from lilou.errors import LilouInputError

        return LilouInputError
    raise AttributeError(f"module 'lilou' has no attribute {name!r}")
