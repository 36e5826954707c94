"""What a graph needs in device memory: its weights as declared and the peak of its live activations; nothing is
read."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lilou.graph.batch_axis import graph_weight_inputs

if TYPE_CHECKING:
    from lilou.graph.dag import ModelGraph
    from lilou.hardware import Device


def memory_needed(graph: ModelGraph) -> tuple[int, int]:
    """(bytes of the weights as declared, bytes of the activations live at once at the peak); nothing is read.

    The peak walks the runtime nodes in order, as an eager runtime allocates: a node's outputs are allocated while
    its inputs are still held, and a tensor is freed after its last reader (the graph's outputs never are). Before,
    the largest single activation stood for the peak: ResNet-50 at batch 1280 "fitted" a 4.75 GiB 1g.5gb slice with
    3.9 GiB, where its first convolution alone holds its 0.7 GiB input and its 3.9 GiB output at once (and the batch
    norm after it both of those outputs: 7.7 GiB). Kernels that fuse a chain keep less; no in-place reuse is assumed.
    """
    ordered = [data for _, data in sorted(graph.dag.nodes(data=True), key=lambda item: item[1]["order"])]
    inputs = {t.name for t in graph.inputs if t is not None} - graph_weight_inputs(graph)  # a weight fed as input
    produced = {t.name for data in ordered for t in data["outputs"] if t is not None}
    weights: dict[str, int] = {}
    last_read: dict[str, int] = {}
    for step, data in enumerate(ordered):
        for t in data["inputs"]:
            if t is None:
                continue
            if t.name not in produced and t.name not in inputs:
                if t.name not in weights:
                    weights[t.name] = t.nbytes or 0
            elif not data["constant"]:
                last_read[t.name] = step
    kept = {t.name for t in graph.outputs if t is not None}
    size = {t.name: t.nbytes or 0 for t in graph.inputs if t is not None and t.name in inputs}
    live = peak = sum(size.values())
    for step, data in enumerate(ordered):
        if data["constant"]:
            continue
        for t in data["outputs"]:
            if t is not None and t.name not in size:
                size[t.name] = t.nbytes or 0
                live += size[t.name]
        peak = max(peak, live)
        for t in (*data["inputs"], *data["outputs"]):
            if t is not None and t.name in size and t.name not in kept and last_read.get(t.name, -1) <= step:
                live -= size.pop(t.name)
    return sum(weights.values()), peak


#: CUDA context + cuBLAS/cuDNN workspace an eager PyTorch process holds before any tensor (about 0.5 GiB on recent
#: drivers; an assumption, not a measurement of each GPU): a model that needs all of a 4.75 GiB 1g.5gb slice does
#: not fit it.
CUDA_CONTEXT_GIB = 0.5


def usable_gib(device: Device) -> float:
    """The device's (or slice's) memory a process's tensors can take: what it holds less the CUDA context."""
    return device.memory_gib - CUDA_CONTEXT_GIB


def fits_memory(need: tuple[int, int], device: Device) -> bool:
    """Whether the weights and the activations live at the peak (:func:`memory_needed`) fit the device's memory, the CUDA
    context taken."""
    return sum(need) <= usable_gib(device) * 2**30
