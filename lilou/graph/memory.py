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


def fits_memory(need: tuple[int, int], device: Device) -> bool:
    """Whether the weights and the largest activation (:func:`memory_needed`) fit the device's memory."""
    return sum(need) <= device.memory_gib * 2**30
