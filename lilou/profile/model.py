"""Time a whole zoo model's eager forward pass on one device: an end-to-end label, written beside the model's
weight-free ONNX export so that `lilou infer` can be put next to it.

The model is the zoo's (:func:`lilou.zoo.registry.build`: a Hugging Face architecture or a generator, random
weights from a fixed seed, eval mode) at the batch and sequence (or image size) asked for, moved to the device in
the precision asked for, and called under ``torch.inference_mode`` on its example inputs: what NeuSight's
end-to-end labels measured (eager PyTorch, one forward, CUDA events). ``tf32`` sets PyTorch's two TF32 flags the
way `lilou infer --tf32` names them (``conv``, PyTorch's default: convolutions only).
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from lilou.profile.provenance import DeviceInfo
from lilou.profile.timing import TIMERS

from lilou.data.profiles import FORMAT_VERSION


def profile_model(name: str, device: str, info: DeviceInfo, batch: int | None, seq: int | None,
                  image_size: int | None, dtype: str, tf32: str, timing: str, repeats: int, warmup: int) -> dict[str, Any]:
    """The label of one model (see the module docstring); ``timing`` is a key of :data:`TIMERS`."""
    import torch

    from lilou.zoo.registry import build

    built = build(name, batch=batch, seq=seq, image_size=image_size)
    torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    module = built.module.to(device=device, dtype=torch_dtype).eval()
    args = tuple(a.to(device=device, dtype=torch_dtype) if a.is_floating_point() else a.to(device) for a in built.args)
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32 == "on"
    torch.backends.cudnn.allow_tf32 = tf32 in ("on", "conv")
    try:
        with torch.inference_mode():
            latency = TIMERS[timing](lambda: module(*args), repeats, warmup)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    return {"format": FORMAT_VERSION, "model": name, "batch": int(built.args[0].shape[0]), "seq": seq, "image_size": image_size,
            "inputs": {n: list(a.shape) for n, a in zip(built.input_names, built.args)},
            "dtype": dtype, "tf32": tf32, "latency_ms": latency, "latency_stat": f"median of {repeats}",
            "timing": timing, "parameters": built.num_parameters, "device": asdict(info)}
