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
    """The lookup key of a MIG profile name: ``MIG 1g.10gb``, ``1G.10GB`` and the Kubernetes resource
    ``nvidia.com/mig-1g.10gb`` give ``1g.10gb``; the device plugin's ``1g.10gb.me`` (a resource name cannot hold a
    ``+``) and Blackwell's ``1g.23gb-me`` give ``1g.10gb+me``, ``1g.23gb+me``."""
    key = re.sub(r"\s+", "", name.lower()).removeprefix("nvidia.com/")
    key = key.removeprefix("mig-").removeprefix("mig")
    return re.sub(r"(\d+g\.\d+gb)[.-]me$", r"\1+me", key)


#: A GPU name with its MIG slice in it, as CUDA names the device inside a slice (``torch.cuda.get_device_name()``:
#: ``NVIDIA A100-SXM4-80GB MIG 1g.10gb``) and GPU feature discovery labels it (``NVIDIA-H100-80GB-HBM3-MIG-1g.10gb``).
_NAME_WITH_MIG = re.compile(r"(?P<gpu>.+?)[\s_-]+mig[\s_-]+(?P<profile>\d+g\.\d+gb\S*)", re.IGNORECASE)


def split_mig(name: str) -> tuple[str, str] | None:
    """(GPU, profile) of a name that carries its MIG slice (:data:`_NAME_WITH_MIG`), else None."""
    found = _NAME_WITH_MIG.fullmatch(name.strip())
    return (found["gpu"], found["profile"]) if found else None


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
