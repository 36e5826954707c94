"""Which GPUs of the database are the same physical chip (die): ``dies.yaml`` beside the GPU database.

A leave-one-GPU-out fold holds out a GPU with its twins, else the fold trains on a copy of the held-out chip.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable
from importlib import resources

import yaml

DATA_FILE = "dies.yaml"


@functools.cache
def dies() -> dict[str, tuple[str, ...]]:
    """Die name -> the database names of its boards (only dies with more than one board are listed)."""
    raw = yaml.safe_load(resources.files("lilou.hardware").joinpath(DATA_FILE).read_text(encoding="utf-8"))
    out = {str(die): tuple(str(g) for g in boards) for die, boards in raw["dies"].items()}
    seen: dict[str, str] = {}
    for die, boards in out.items():
        for gpu in boards:
            if gpu in seen:
                raise ValueError(f"{DATA_FILE}: {gpu} is listed under {seen[gpu]} and {die}")
            seen[gpu] = die
    return out


def die_of(gpu: str) -> str:
    """The die of a database GPU name (the name itself for a board whose die has no other board)."""
    return next((die for die, boards in dies().items() if gpu in boards), gpu)


def twins(gpu: str) -> tuple[str, ...]:
    """``gpu`` and every other board on its die, ``gpu`` first."""
    return (gpu, *(g for g in dies().get(die_of(gpu), ()) if g != gpu))


def chip_groups(gpus: Iterable[str]) -> list[tuple[str, ...]]:
    """``gpus`` grouped by die, each group sorted and the groups in order of their first member: one
    leave-one-chip-out fold per group."""
    groups: dict[str, list[str]] = {}
    for gpu in sorted(set(gpus)):
        groups.setdefault(die_of(gpu), []).append(gpu)
    return [tuple(members) for members in groups.values()]
