"""Time a sweep of operator calls on one device and turn each into a kernel-table row.

Every call is the PyTorch eager op a user's program runs (``F.linear``, ``torch.bmm``, ``F.conv2d``, ``x + y`` ...)
on random inputs already on the device, under ``torch.inference_mode``. ``fp32`` turns TF32 off for matmuls and
convolutions (NeuSight's setting), ``tf32`` turns it on for both; the flags are put back afterwards. A case the
device cannot run (BF16 before Ampere, more memory than is free, an op the backend lacks) is skipped with its
reason, counted, never timed at another precision in its place.
"""
from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from lilou.profile.provenance import DeviceInfo, software
from lilou.profile.sweep import MATH_FAMILIES, OpCase
from lilou.profile.timing import TIMERS

SOURCE = "lilou_profile"
#: Share of the device's free memory one case may take (its tensors; the library's workspace comes on top).
MEMORY_SHARE = 0.4
_ITEMSIZE = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}
_INCLUDES = {"cuda-events-eager": "the whole eager call, its launch by the host included",
             "cuda-graph-replay": "the call's kernels replayed from a CUDA graph (no per-kernel launch)",
             "host-timer-loop": "the whole call on the CPU"}


@dataclass
class ProfileResult:
    rows: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)


def unit_of(case: OpCase, device: DeviceInfo) -> str | None:
    """The unit whose peak bounds the case's math (a key of the GPU database's peaks), None when memory-bound or
    on a CPU."""
    if case.family not in MATH_FAMILIES or device.kind == "cpu":
        return None
    major = int((device.compute_capability or "0.0").split(".")[0])
    if case.dtype == "fp32":
        return "fp32"
    if case.dtype == "fp16":
        return "fp16_tensor" if major >= 7 else "fp16"
    return f"{case.dtype}_tensor"


def unsupported(case: OpCase, device: DeviceInfo) -> str | None:
    """Why the device cannot run the case at its precision, or None."""
    if device.kind == "cpu" or case.dtype not in ("tf32", "bf16"):
        return None
    major = int((device.compute_capability or "0.0").split(".")[0])
    return None if major >= 8 else f"{case.dtype} needs compute capability 8.0 or later"


def profile_ops(cases: Sequence[OpCase], device: str, info: DeviceInfo, timings: Sequence[str], repeats: int,
                warmup: int, max_elements: int | None = None,
                progress: Callable[[int, OpCase], None] | None = None) -> ProfileResult:
    """Time every case with every timing method; ``device`` is ``cpu`` or ``cuda[:N]``."""
    import torch

    result = ProfileResult()
    framework = _framework()
    torch.manual_seed(0)
    with torch.inference_mode(), _tf32_flags_restored():
        for index, case in enumerate(cases):
            if progress:
                progress(index, case)
            reason = unsupported(case, info) or _too_big(case, device, max_elements)
            if reason:
                result.skipped[reason] += len(timings)
                continue
            try:
                call = build_call(case, device)
            except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:
                result.skipped[f"{type(exc).__name__} building the inputs"] += len(timings)
                _release(device)
                continue
            for timing in timings:
                try:
                    latency = TIMERS[timing](call, repeats, warmup)
                except (RuntimeError, NotImplementedError) as exc:  # CUDA OOM, an op without a kernel for the dtype
                    result.skipped[f"{type(exc).__name__} while timing ({_first_line(exc)})"] += 1
                    _release(device)
                    continue
                result.rows.append(_row(case, info, timing, latency, repeats, framework))
            del call
            _release(device)
    return result


def build_call(case: OpCase, device: str) -> Callable[[], object]:
    """The case's eager call on fresh random inputs (TF32 flags set for its precision)."""
    import torch
    import torch.nn.functional as F

    dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[case.dtype]
    torch.backends.cuda.matmul.allow_tf32 = case.dtype == "tf32"
    torch.backends.cudnn.allow_tf32 = case.dtype == "tf32"
    s = case.shape

    def rand(*shape: int):
        return torch.randn(*shape, device=device, dtype=dtype)

    if case.family == "gemm":
        x, weight, bias = rand(s["m"], s["k"]), rand(s["n"], s["k"]), rand(s["n"])
        return lambda: F.linear(x, weight, bias)
    if case.family == "bmm":
        a, b = rand(s["batch"], s["m"], s["k"]), rand(s["batch"], s["k"], s["n"])
        return lambda: torch.bmm(a, b)
    if case.family == "conv":
        x = rand(s["batch"], s["in_c"], s["in_h"], s["in_w"])
        weight = rand(s["out_c"], s["in_c"] // s["groups"], s["kernel_h"], s["kernel_w"])
        stride, pad, groups = (s["stride_h"], s["stride_w"]), (s["pad_h"], s["pad_w"]), s["groups"]
        return lambda: F.conv2d(x, weight, None, stride, pad, 1, groups)
    x = rand(s["rows"], s["cols"])
    if case.family == "softmax":
        return lambda: F.softmax(x, dim=-1)
    if case.family == "norm":
        weight, bias = rand(s["cols"]), rand(s["cols"])
        return lambda: F.layer_norm(x, (s["cols"],), weight, bias)
    y = rand(s["rows"], s["cols"])
    calls = {"add": lambda: x + y, "mul": lambda: x * y, "addu": lambda: x + 1.5, "mulu": lambda: x * 1.5,
             "relu": lambda: F.relu(x), "gelu": lambda: F.gelu(x), "tanh": lambda: torch.tanh(x)}
    return calls[case.op]


def _row(case: OpCase, info: DeviceInfo, timing: str, latency: float, repeats: int, framework: str) -> dict:
    return {"source": SOURCE, "device": info.name, "device_kind": info.kind, "dtype": case.dtype,
            "unit": unit_of(case, info), "family": case.family, "op": case.op, "mode": "forward",
            **case.shape, "bias": True if case.op == "linear" else False if case.op == "bmm" else None,
            "latency_ms": latency, "latency_stat": f"median of {repeats}", "timing": timing,
            "includes": _INCLUDES[timing], "framework": framework}


def _too_big(case: OpCase, device: str, max_elements: int | None) -> str | None:
    elements = case.elements()
    if max_elements is not None and elements > max_elements:
        return f"more than {max_elements:,} elements (--max-elements)"
    if device == "cpu":
        return None
    import torch

    free, _ = torch.cuda.mem_get_info(torch.device(device))
    need = elements * _ITEMSIZE[case.dtype]
    if need > MEMORY_SHARE * free:
        return f"needs more than {MEMORY_SHARE:.0%} of the free device memory"
    return None


def _framework() -> str:
    """The row's ``framework``: PyTorch, CUDA and cuDNN versions as the provenance records them."""
    versions = software()
    names = (("torch", "PyTorch"), ("cuda", "CUDA"), ("cudnn", "cuDNN"))
    return " ".join(f"{label} {versions[key]}" for key, label in names if versions[key])


@contextlib.contextmanager
def _tf32_flags_restored() -> Iterator[None]:
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _release(device: str) -> None:
    if device != "cpu":
        import torch

        torch.cuda.empty_cache()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:80] if text else "no message"

