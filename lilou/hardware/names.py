"""How users and datasets spell GPU and MIG profile names, and what we suggest on a typo.

A GPU name is reduced to a *key*: lowercase letters and digits only, with a leading
vendor or brand word ("nvidia", "tesla", "geforce") dropped. So ``NVIDIA A10G``,
``nvidia-a10g``, ``a10g`` and ``Tesla_T4`` / ``t4`` meet on the same keys.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

_BRAND_WORDS = ("nvidia", "tesla", "geforce")


def gpu_key(name: str) -> str:
    """The lookup key of a GPU name: brand words dropped, case and punctuation ignored."""
    words = re.split(r"[^a-z0-9]+", name.lower())
    words = [word for word in words if word]
    while words and words[0] in _BRAND_WORDS:
        words.pop(0)
    return "".join(words)


def name_list(names: str | Iterable[str]) -> list[str] | Iterable[str]:
    """Device names as a list: a string is a comma-separated one, as ``--gpus a10g,t4`` writes it (iterated, a
    string gave one name per letter)."""
    return names.split(",") if isinstance(names, str) else names


def mig_key(name: str) -> str:
    """The lookup key of a MIG profile name: ``MIG 1g.10gb`` and ``1G.10GB`` give ``1g.10gb``."""
    key = re.sub(r"\s+", "", name.lower())
    return key.removeprefix("mig-").removeprefix("mig")


def closest(word: str, spellings_by_gpu: Mapping[str, Iterable[str]], limit: int = 3) -> list[str]:
    """Suggest names for a misspelt ``word``: the best-matching spelling of each of the
    ``limit`` most similar GPUs (one spelling per GPU, so aliases do not crowd others out)."""
    target = gpu_key(word)
    scored: list[tuple[float, str]] = []
    for spellings in spellings_by_gpu.values():
        # On a tie the shorter spelling wins: it is usually the one people type.
        score, spelling = max(((_similarity(target, gpu_key(s)), s) for s in spellings),
                              key=lambda item: (item[0], -len(item[1])))
        if score >= _MIN_SIMILARITY:
            scored.append((score, spelling))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [spelling for _, spelling in scored[:limit]]


_MIN_SIMILARITY = 0.5


def _similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()
