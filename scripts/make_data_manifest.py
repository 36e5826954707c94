"""Generate lilou/data/manifests/<dataset>.json from a local mirror of the datasets.

    python scripts/make_data_manifest.py [--mirror ../shared/datasets] [--check]

The local layout differs from the upstream one (NeuSight's
``kernels/train/linear/Tesla_T4.csv`` is upstream
``scripts/asplos/data/dataset/train/collect/linear/p2.1.0/Tesla_T4.csv``), so the
mapping is rebuilt here rather than written by hand:

* datasets with ``UPSTREAM_SHA256SUMS`` (neusight, wattgpu): hash every local file
  and match it against the sums; a hash listed under several upstream paths (the
  same device config in train/ and test/) is resolved by path similarity. Files
  whose hash matches nothing are the ones with held-back rows: they are mapped by
  file name and folder names, and keep the upstream hash, with the mirror copy's beside it (``mirror_sha256``:
  ``lilou data verify`` checks a curated mirror's filtered copy against it);
* llm_energy has no sums: its sub-folders' ``SOURCE`` files list what was copied
  verbatim from where; the rules below restate them and are checked against that text;
* aiconfigurator, vidur, deepbench, liger_kernel: their ``SOURCE`` states the layout as
  "local path = upstream path without a prefix" (``PREFIXED`` below, checked against
  that text). Every ``UPSTREAM_SHA256SUMS`` line maps to one local file, which must
  match it byte for byte unless ``SOURCE`` says it was filtered (held-back); files the
  sums do not list must be the mirror's derived tables (``*_tidy.csv``) or notes.

Only paths, hashes and sizes are written, never data rows. The repository and
commit of each upstream come from ``lilou.data.sources`` and are checked against
the ``SOURCE`` files.
"""
from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lilou.data.sources import DATASETS, Upstream  # noqa: E402

OUT = REPO / "lilou" / "data" / "manifests"
NOTES = {"SOURCE", "UPSTREAM_SHA256SUMS", "README.md"}


@dataclass
class Entry:
    path: str
    upstream: str | None
    upstream_path: str | None
    sha256: str | None
    size: int | None
    origin: str
    mirror_sha256: str | None = None  # a held-back file: the curated mirror's filtered copy (lilou data verify)

    def as_json(self) -> dict:
        return {key: value for key, value in self.__dict__.items()
                if key != "mirror_sha256" or value is not None}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def local_files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def read_sums(path: Path) -> list[tuple[str, str]]:
    sums = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            digest, name = line.split(None, 1)
            sums.append((digest, name.strip().lstrip("*")))
    return sums


def similarity(local: str, upstream: str) -> int:
    """Same file name first, then how many of the local folder names appear upstream."""
    lp, up = PurePosixPath(local), PurePosixPath(upstream)
    return 100 * (lp.name == up.name) + len(set(lp.parent.parts) & set(up.parent.parts))


def check_pin(source_text: str, upstream: Upstream, where: str) -> None:
    if upstream.repo.lower() not in source_text.lower() or upstream.commit not in source_text:
        raise SystemExit(f"{where}: SOURCE does not name {upstream.repo} at {upstream.commit}; "
                         "update lilou/data/sources.py")


def map_with_sums(name: str, folder: Path) -> list[Entry]:
    """neusight, wattgpu: match local hashes to UPSTREAM_SHA256SUMS, then map the rest by path."""
    dataset = DATASETS[name]
    (key, upstream), = dataset.upstreams.items()
    check_pin((folder / "SOURCE").read_text(encoding="utf-8"), upstream, name)
    sums = read_sums(folder / "UPSTREAM_SHA256SUMS")
    by_hash: dict[str, list[str]] = {}
    for digest, path in sums:
        by_hash.setdefault(digest, []).append(path)
    upstream_hash = {path: digest for digest, path in sums}

    entries, unmatched, used = [], [], set()
    for rel in local_files(folder):
        if rel in NOTES:
            entries.append(Entry(rel, None, None, None, None, "notes"))
            continue
        digest = sha256_of(folder / rel)
        candidates = by_hash.get(digest)
        if candidates:
            best = max(sorted(candidates), key=lambda u: similarity(rel, u))
            used.add(best)
            entries.append(Entry(rel, key, best, digest, (folder / rel).stat().st_size, "verbatim"))
        else:
            unmatched.append((rel, digest))

    for rel, digest in unmatched:
        if rel == "LICENSE":  # licence files are not in the published sums
            entries.append(Entry(rel, key, "LICENSE", digest, (folder / rel).stat().st_size, "copied"))
            continue
        free = [u for u in upstream_hash if u not in used]
        scores = {u: similarity(rel, u) for u in free}
        top = max(scores.values(), default=0)
        best = sorted(u for u, s in scores.items() if s == top)
        if top < 100 or len(best) != 1:
            raise SystemExit(f"{name}/{rel}: no unique upstream file for it (candidates {best[:5]})")
        used.add(best[0])
        # Rows held back locally: a download must match the upstream file, whose size is not published.
        entries.append(Entry(rel, key, best[0], upstream_hash[best[0]], None, "held-back", digest))
    return sorted(entries, key=lambda e: e.path)


# llm_energy: (sub-folder, local glob, upstream key, upstream path template); {path} is the
# path below the sub-folder, {name} the file name; globs are fnmatch ("*" spans folders). Restated from each sub-folder's SOURCE.
LLM_ENERGY_RULES: list[tuple[str, str, str, str]] = [
    ("llm_inference_bench", "All_results.csv", "llm_inference_bench", "Plots/All_results.csv"),
    ("llm_inference_bench", "power_results.csv", "llm_inference_bench", "Plots/Fig_16_a_b/power_results.csv"),
    ("llm_inference_bench", "all_results_TTFT_ITL.csv", "llm_inference_bench", "Plots/Fig_22/all_results_TTFT_ITL.csv"),
    ("llm_inference_bench", "all_results_TTFT.csv", "llm_inference_bench", "Plots/Fig_21/all_results_TTFT.csv"),
    ("llm_inference_bench", "LICENSE", "llm_inference_bench", "LICENSE"),
    ("mlenergy_v1_2023", "*_benchmark.csv", "mlenergy_v1_2023", "data/legacy/{name}"),
    ("mlenergy_v1_2023", "models.json", "mlenergy_v1_2023", "data/legacy/{name}"),
    ("mlenergy_v1_2023", "LICENSE", "mlenergy_v1_2023", "LICENSE"),
    ("mlenergy_v2_2024", "llm_text_generation/*", "mlenergy_v2_2024", "data/{path}"),
    ("mlenergy_v2_2024", "mllm_text_generation/*", "mlenergy_v2_2024", "data/{path}"),
    ("mlenergy_v2_2024", "LICENSE", "mlenergy_v2_2024", "LICENSE"),
    ("mlenergy_v3_2025", "index.json", "mlenergy_v3_2025", "public/data/{path}"),
    ("mlenergy_v3_2025", "tasks/*", "mlenergy_v3_2025", "public/data/{path}"),
    ("mlenergy_v3_2025", "models/*", "mlenergy_v3_2025", "public/data/{path}"),
    ("mlenergy_v3_2025", "LICENSE", "mlenergy_data", "data_publishing/LICENSE"),
    ("mlenergy_v3_2025", "DATASET_CARD.md", "mlenergy_data", "data_publishing/DATASET_CARD.md"),
]
# Text each sub-folder's SOURCE must contain for the rules above to hold.
LLM_ENERGY_EVIDENCE = {
    "llm_inference_bench": ["Plots/All_results.csv", "Plots/Fig_16_a_b/power_results.csv",
                            "Plots/Fig_22/all_results_TTFT_ITL.csv", "Plots/Fig_21/all_results_TTFT.csv"],
    "mlenergy_v1_2023": ["data/legacy/{A100,A40,V100}_{chat,chat-concise,instruct,instruct-concise}_benchmark.csv",
                         "data/legacy/models.json"],
    "mlenergy_v2_2024": ["directory layout kept", "data/llm_text_generation/chat/", "data/mllm_text_generation/chat/"],
    "mlenergy_v3_2025": ["public/data/index.json", "public/data/tasks/", "public/data/models/",
                         "data_publishing/LICENSE", "data_publishing/DATASET_CARD.md"],
}
LLM_ENERGY_PINS = {  # upstream key -> sub-folder whose SOURCE names it
    "llm_inference_bench": "llm_inference_bench", "mlenergy_v1_2023": "mlenergy_v1_2023",
    "mlenergy_v2_2024": "mlenergy_v2_2024", "mlenergy_v3_2025": "mlenergy_v3_2025", "mlenergy_data": "mlenergy_v3_2025",
}


def map_llm_energy(folder: Path) -> list[Entry]:
    dataset = DATASETS["llm_energy"]
    for key, sub in LLM_ENERGY_PINS.items():
        check_pin((folder / sub / "SOURCE").read_text(encoding="utf-8"), dataset.upstreams[key], f"llm_energy/{sub}")
    for sub, needles in LLM_ENERGY_EVIDENCE.items():
        text = (folder / sub / "SOURCE").read_text(encoding="utf-8")
        missing = [n for n in needles if n not in text]
        if missing:
            raise SystemExit(f"llm_energy/{sub}/SOURCE no longer mentions {missing}: revise LLM_ENERGY_RULES")

    entries = []
    for rel in local_files(folder):
        path = PurePosixPath(rel)
        if path.name in NOTES:
            entries.append(Entry(rel, None, None, None, None, "notes"))
            continue
        size = (folder / rel).stat().st_size
        if re.search(r"_(flat|tidy)\.csv$", path.name):  # the mirror's derived tables
            entries.append(Entry(rel, None, None, sha256_of(folder / rel), size, "derived"))
            continue
        sub, below = path.parts[0], PurePosixPath(*path.parts[1:])
        for rule_sub, pattern, key, template in LLM_ENERGY_RULES:
            if rule_sub == sub and fnmatch.fnmatchcase(below.as_posix(), pattern):
                upstream_path = template.format(path=below.as_posix(), name=below.name)
                entries.append(Entry(rel, key, upstream_path, sha256_of(folder / rel), size, "copied"))
                break
        else:
            raise SystemExit(f"llm_energy/{rel}: no rule says where it comes from")
    return entries


@dataclass(frozen=True)
class Prefixed:
    """A dataset laid out as ``local path = upstream path without prefix`` (LICENSE at the root)."""

    prefix: str                          # "" for the same relative paths
    evidence: tuple[str, ...]            # text SOURCE must contain for the rule to hold
    held_back: tuple[str, ...] = ()      # local paths SOURCE says were filtered
    derived: str | None = None           # fnmatch pattern of the mirror's derived tables


PREFIXED: dict[str, Prefixed] = {
    "aiconfigurator": Prefixed(
        "aic-core/src/aiconfigurator_core/systems/",
        ("local path = upstream path without the prefix aic-core/src/aiconfigurator_core/systems/",)),
    "vidur": Prefixed("data/profiling/", ("local path = upstream path without the prefix data/profiling/",)),
    "deepbench": Prefixed("", ("Copied verbatim (same relative paths)", "gemm_tidy.csv, conv_tidy.csv, rnn_tidy.csv"),
                          derived="*_tidy.csv"),
    "liger_kernel": Prefixed(
        "benchmark/data/",
        ("benchmark/data/all_benchmark_data.csv -> all_benchmark_data.csv: FILTERED",
         "benchmark/data/all_benchmark_data_cutile.csv -> all_benchmark_data_cutile.csv (verbatim",
         "benchmark/data/all_benchmark_data_cutedsl.csv -> all_benchmark_data_cutedsl.csv (verbatim"),
        held_back=("all_benchmark_data.csv",)),
}


def map_prefixed(name: str, folder: Path) -> list[Entry]:
    """aiconfigurator, vidur, deepbench, liger_kernel: upstream path = prefix + local path."""
    rule = PREFIXED[name]
    (key, upstream), = DATASETS[name].upstreams.items()
    source = (folder / "SOURCE").read_text(encoding="utf-8")
    check_pin(source, upstream, name)
    missing = [n for n in rule.evidence if n not in source]
    if missing:
        raise SystemExit(f"{name}/SOURCE no longer says {missing}: revise PREFIXED")

    by_local: dict[str, tuple[str, str]] = {}  # local path -> (upstream path, upstream sha256)
    for digest, upstream_path in read_sums(folder / "UPSTREAM_SHA256SUMS"):
        if upstream_path.startswith(rule.prefix):
            local = upstream_path[len(rule.prefix):]
        elif "/" not in upstream_path:  # LICENSE and other root files keep their name
            local = upstream_path
        else:
            raise SystemExit(f"{name}: upstream {upstream_path} is not under {rule.prefix!r}")
        if local in by_local:
            raise SystemExit(f"{name}: two upstream files map to {local}")
        by_local[local] = (upstream_path, digest)

    entries, seen = [], set()
    for rel in local_files(folder):
        size = (folder / rel).stat().st_size
        if rel in NOTES:
            entries.append(Entry(rel, None, None, None, None, "notes"))
        elif rel in by_local:
            seen.add(rel)
            upstream_path, digest = by_local[rel]
            local_digest = sha256_of(folder / rel)
            if local_digest == digest:
                entries.append(Entry(rel, key, upstream_path, digest, size, "verbatim"))
            elif rel in rule.held_back:
                # Rows held back locally: a download must match the upstream file, whose size is not published.
                entries.append(Entry(rel, key, upstream_path, digest, None, "held-back", local_digest))
            else:
                raise SystemExit(f"{name}/{rel}: sha256 differs from UPSTREAM_SHA256SUMS and SOURCE does not "
                                 "say it was filtered")
        elif rule.derived and fnmatch.fnmatchcase(rel, rule.derived):
            entries.append(Entry(rel, None, None, sha256_of(folder / rel), size, "derived"))
        else:
            raise SystemExit(f"{name}/{rel}: not in UPSTREAM_SHA256SUMS, not derived, not a note")
    absent = sorted(set(by_local) - seen)
    if absent:
        raise SystemExit(f"{name}: {len(absent)} files of UPSTREAM_SHA256SUMS are not in the mirror (e.g. {absent[0]})")
    stray = sorted(set(rule.held_back) - seen)
    if stray:
        raise SystemExit(f"{name}: held-back {stray} not in UPSTREAM_SHA256SUMS")
    return entries


def build(name: str, mirror: Path) -> dict:
    folder = mirror / name
    if name == "llm_energy":
        entries = map_llm_energy(folder)
    elif name in PREFIXED:
        entries = map_prefixed(name, folder)
    else:
        entries = map_with_sums(name, folder)
    dataset = DATASETS[name]
    used = sorted({e.upstream for e in entries if e.upstream})
    return {
        "dataset": name,
        "generated_by": "scripts/make_data_manifest.py",
        "upstreams": {k: {"repo": dataset.upstreams[k].repo, "commit": dataset.upstreams[k].commit} for k in used},
        "files": [e.as_json() for e in entries],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true", help="fail if a shipped manifest differs")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    stale = []
    for name in DATASETS:
        text = json.dumps(build(name, args.mirror), indent=1) + "\n"
        target = args.out / f"{name}.json"
        origins: dict[str, int] = {}
        for entry in json.loads(text)["files"]:
            origins[entry["origin"]] = origins.get(entry["origin"], 0) + 1
        print(f"{name}: {sum(origins.values())} files {origins}")
        if args.check:
            if not target.is_file() or target.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            target.write_text(text, encoding="utf-8")
    if stale:
        print(f"stale manifests: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
