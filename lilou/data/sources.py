"""Registry of the public datasets Lilou reads: where each comes from and what it holds.

Each dataset is pinned to one commit of each upstream repository. Its file list
(the *manifest*: local path, upstream path, sha256, size) is generated from the
local mirror and the mirror's ``UPSTREAM_SHA256SUMS``/``SOURCE`` files by
``scripts/make_data_manifest.py`` and shipped as ``lilou/data/manifests/<name>.json``.
No data rows are shipped: the project reads the measurements at run time.

``origin`` of a manifest entry says how far its hash can be trusted:

* ``verbatim``  the local file matches ``UPSTREAM_SHA256SUMS`` byte for byte;
* ``held-back`` the local mirror holds back some rows (H100/L4 rows of NeuSight's
  test kernels, H100 rows of Liger-Kernel's ``all_benchmark_data.csv``); the sha256
  is the upstream one, ``size`` is unknown (None);
* ``copied``    the upstream publishes no sums for it (licences, ML.ENERGY and
  Argonne files); ``SOURCE`` says it was copied verbatim, so the sha256 is the
  local copy's;
* ``derived``   made for the mirror from verbatim files (``*_flat.csv``, DeepBench's
  ``*_tidy.csv``); not downloadable;
* ``notes``     the mirror's own notes (``SOURCE``, ``README.md``, ``UPSTREAM_SHA256SUMS``);
  not downloadable.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from urllib.parse import quote

from lilou.errors import LilouInputError

RAW_GITHUB = "https://raw.githubusercontent.com"
DOWNLOADABLE_ORIGINS = frozenset({"verbatim", "held-back", "copied"})


@dataclass(frozen=True)
class Upstream:
    """One public repository pinned to a commit."""

    repo: str      # "owner/name" on GitHub
    commit: str    # full 40-hex sha
    licence: str

    def raw_url(self, path: str) -> str:
        return f"{RAW_GITHUB}/{self.repo}/{self.commit}/{quote(path)}"


@dataclass(frozen=True)
class ManifestFile:
    """One file of a dataset, as laid out under ``<data root>/<dataset>/``."""

    path: str                  # local path relative to the dataset folder (POSIX)
    upstream: str | None       # key into Dataset.upstreams; None for derived/notes files
    upstream_path: str | None  # path inside the upstream repository
    sha256: str | None         # what a download must match
    size: int | None           # bytes of the upstream file, None when unknown
    origin: str                # see the module docstring
    mirror_sha256: str | None = None  # a held-back file's filtered copy in the curated mirror

    @property
    def downloadable(self) -> bool:
        return self.upstream_path is not None and self.sha256 is not None


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    licence: str
    upstreams: dict[str, Upstream]

    @property
    def repository(self) -> str:
        """Upstream repositories, comma-separated (llm_energy has several)."""
        return ", ".join(sorted({u.repo for u in self.upstreams.values()}))

    @property
    def commit(self) -> str:
        return ", ".join(sorted({u.commit for u in self.upstreams.values()}))

    @property
    def files(self) -> tuple[ManifestFile, ...]:
        return load_manifest(self.name)

    def missing_files(self, folder: Path) -> list[str]:
        """The downloadable files of the manifest not under ``folder`` (the dataset's folder in a data root)."""
        return [f.path for f in self.files if f.downloadable and not (folder / f.path).is_file()]

    def url(self, entry: ManifestFile) -> str:
        """Download URL of one file in its pinned upstream repository."""
        if not entry.downloadable or entry.upstream is None:
            raise LilouInputError(f"{self.name}/{entry.path} is {entry.origin} and cannot be downloaded")
        return self.upstreams[entry.upstream].raw_url(entry.upstream_path)  # type: ignore[arg-type]


_ML_ENERGY_BENCHMARK = Upstream("ml-energy/benchmark", "d0311acfa99b88ac6a389ce12ee53b33014fa56d", "Apache-2.0")

DATASETS: dict[str, Dataset] = {
    "neusight": Dataset(
        name="neusight",
        description="NeuSight (ASPLOS 2025): 256k per-operator FP32 latencies (PyTorch 2.1 eager) "
                    "on P4/P100/T4/V100/A100, test kernels, end-to-end model latencies, device specs",
        licence="MIT",
        upstreams={"neusight": Upstream("sitar-lab/NeuSight", "6945927d9afcca2b9daf021f8395e53edc5b4eef", "MIT")},
    ),
    "wattgpu": Dataset(
        name="wattgpu",
        description="WattGPU: TechPowerUp spec columns of 11 GPUs and metadata of 51 open LLMs "
                    "(its power measurements are not included)",
        licence="Apache-2.0",
        upstreams={"wattgpu": Upstream("maufadel/wattgpu", "4e010359c167ac8c65b55aabd1aafbf765ae5d91", "Apache-2.0")},
    ),
    "llm_energy": Dataset(
        name="llm_energy",
        description="LLM serving power/energy and per-token latency (ML.ENERGY leaderboard v1-v3, "
                    "Argonne LLM-Inference-Bench) on A100/A40/V100/H100/B200/GH200",
        licence="Apache-2.0 AND BSD-3-Clause",
        upstreams={
            "llm_inference_bench": Upstream("argonne-lcf/LLM-Inference-Bench",
                                            "4211f5d4e9bc0145ed541b6d372d5d8223b44235", "BSD-3-Clause"),
            "mlenergy_v1_2023": _ML_ENERGY_BENCHMARK,
            "mlenergy_v2_2024": _ML_ENERGY_BENCHMARK,
            "mlenergy_v3_2025": Upstream("ml-energy/leaderboard",
                                         "0cd52dab897c5d91a45f4d413038f3b8b4251b0f", "Apache-2.0"),
            "mlenergy_data": Upstream("ml-energy/data", "b37408f35fcdd08a9f5c3daf3dfedcd59a87a58b", "Apache-2.0"),
        },
    ),
    "aiconfigurator": Dataset(
        name="aiconfigurator",
        description="AIConfigurator: LLM-serving per-op latencies (GEMM, context/generation attention, MoE; "
                    "CUDA-graph timed, vLLM/TRT-LLM/SGLang) on A100, L40S, H200, B200, GB200, B300, GB300, "
                    "RTX PRO 6000, Arc Pro B60",
        licence="Apache-2.0",
        upstreams={"aiconfigurator": Upstream("ai-dynamo/aiconfigurator",
                                              "095f58a51c4ca8e61b66ec108d86f223f8d559ce", "Apache-2.0")},
    ),
    "vidur": Dataset(
        name="vidur",
        description="Vidur (MLSys 2024): per-op GPU time (FP16, torch.profiler) of a transformer block's "
                    "projections, norms, rope and MLP for 8 LLMs on A100 and A40 (no attention kernels)",
        licence="MIT",
        upstreams={"vidur": Upstream("microsoft/vidur", "7d47513363ec447a741ac5e47241580b47724fbf", "MIT")},
    ),
    "deepbench": Dataset(
        name="deepbench",
        description="DeepBench: cuBLAS/cuDNN GEMM, conv and RNN times on 8 older NVIDIA GPUs (M40 to V100/T4), "
                    "upstream workbooks plus derived tidy tables",
        licence="Apache-2.0",
        upstreams={"deepbench": Upstream("baidu-research/DeepBench",
                                         "da81ba7820739e2e506dc27f382d15be5479f98f", "Apache-2.0")},
    ),
    "liger_kernel": Dataset(
        name="liger_kernel",
        description="Liger-Kernel: speed and memory of Triton LLM-layer kernels vs PyTorch/HF "
                    "(do_bench) on A100, RTX 3090/4090, B200",
        licence="BSD-2-Clause",
        upstreams={"liger_kernel": Upstream("linkedin/Liger-Kernel",
                                            "ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c", "BSD-2-Clause")},
    ),
}


def dataset_names() -> list[str]:
    return list(DATASETS)


def get_dataset(name: str) -> Dataset:
    try:
        return DATASETS[name]
    except KeyError:
        raise LilouInputError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}") from None


@cache
def load_manifest(name: str) -> tuple[ManifestFile, ...]:
    """The shipped file list of a dataset (cached)."""
    dataset = get_dataset(name)
    text = resources.files("lilou.data").joinpath("manifests", f"{name}.json").read_text(encoding="utf-8")
    raw = json.loads(text)
    for key, pinned in raw.get("upstreams", {}).items():
        known = dataset.upstreams.get(key)
        if known is None or (known.repo, known.commit) != (pinned["repo"], pinned["commit"]):
            # The hashes belong to the commit the manifest was made from.
            raise RuntimeError(f"manifest of {name} was made for {pinned}, registry says {known}: "
                               "re-run scripts/make_data_manifest.py")
    return tuple(ManifestFile(path=f["path"], upstream=f.get("upstream"), upstream_path=f.get("upstream_path"),
                              sha256=f.get("sha256"), size=f.get("size"), origin=f["origin"],
                              mirror_sha256=f.get("mirror_sha256"))
                 for f in raw["files"])
