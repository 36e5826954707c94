"""What a graph needs in device memory: its weights as declared and its largest activation; nothing is read."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lilou.graph.dag import ModelGraph
    from lilou.hardware import Device


def memory_needed(graph: ModelGraph) -> tuple[int, int]:
    """(bytes of the weights as declared, bytes of the largest activation tensor); nothing is read."""
    data = graph.dag.nodes
    produced = {t.name: t for n in data for t in data[n]["outputs"]}
    inputs = {t.name: t for t in graph.inputs}
    weights: dict[str, int] = {}
    for n in data:
        for t in data[n]["inputs"]:
            if t is not None and t.name not in produced and t.name not in inputs:
                weights[t.name] = t.nbytes or 0
    constant = {t.name for n in data if data[n]["constant"] for t in data[n]["outputs"]}
    activations = [t.nbytes or 0 for name, t in {**inputs, **produced}.items() if name not in constant]
    return sum(weights.values()), max(activations, default=0)


#: CUDA context + cuBLAS/cuDNN workspace an eager PyTorch process holds before any tensor (about 0.5 GiB on recent
#: drivers; an assumption, not a measurement of each GPU): a model that needs all of a 4.75 GiB 1g.5gb slice does
#: not fit it.
CUDA_CONTEXT_GIB = 0.5


def usable_gib(device: Device) -> float:
    """The device's (or slice's) memory a process's tensors can take: what it holds less the CUDA context."""
    return device.memory_gib - CUDA_CONTEXT_GIB


def fits_memory(need: tuple[int, int], device: Device) -> bool:
    """Whether the weights and the largest activation (:func:`memory_needed`) fit the device's memory, the CUDA
    context taken."""
    return sum(need) <= usable_gib(device) * 2**30
