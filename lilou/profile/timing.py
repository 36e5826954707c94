"""How `lilou profile` times one call, in the kernel table's timing methods (lilou.data.kernel_schema).

- ``cuda-events-eager``: the device is idle, a CUDA event is recorded, the eager call is made, a second event is
  recorded and waited for. The time therefore includes the host's launch of the call, as NeuSight's rows and a
  user's eager program see it (a one-element add measures the host's launch floor).
- ``cuda-graph-replay``: the call is captured once in a CUDA graph and each replay is timed the same way: the GPU
  work of its kernels without the per-kernel launches (AIConfigurator's method).
- ``host-timer-loop`` (CPU only, a dry run of the sweep): the host clock around back-to-back calls, divided by
  their count.

Each returns the median over ``repeats`` timed calls after ``warmup`` untimed ones, in milliseconds.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

Call = Callable[[], object]


def time_cuda_eager(call: Call, repeats: int, warmup: int) -> float:
    import torch

    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def time_cuda_graph(call: Call, repeats: int, warmup: int) -> float:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as torch.cuda.graphs asks before capture
        for _ in range(max(warmup, 1)):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return time_cuda_eager(graph.replay, repeats, warmup=1)


def time_host_loop(call: Call, repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        call()
    loops = []
    for _ in range(max(repeats // 5, 1)):  # groups of five calls: a median over groups, each group's mean
        start = time.perf_counter()
        for _ in range(5):
            call()
        loops.append((time.perf_counter() - start) / 5 * 1e3)
    return statistics.median(loops)


TIMERS: dict[str, Callable[[Call, int, int], float]] = {
    "cuda-events-eager": time_cuda_eager,
    "cuda-graph-replay": time_cuda_graph,
    "host-timer-loop": time_host_loop,
}
