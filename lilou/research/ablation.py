"""Shared plumbing of the ablation scripts (``scripts/ablate_*.py``, ``scripts/plot_resources.py``).

Each script composes Hydra configs from ``conf/`` in-process, calls the training
functions, and writes ``outputs/results/<name>.csv`` (the table), ``<name>.png``
(the figure) and ``<name>.json`` (the exact command, seed, overrides, data and wall
time) beside it; ``scripts/make_report.py`` turns those into ``docs/results.md``.
"""
from __future__ import annotations

import contextlib
import csv
import functools
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from lilou.quiet import quiet_lightning  # noqa: F401 - re-exported for the ablation scripts
from lilou.runs import data_dir_used

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
RESULTS = REPO / "outputs" / "results"


def compose(overrides: Sequence[str] = (), config_name: str = "train"):
    """The Hydra config ``conf/<config_name>.yaml`` with ``overrides`` (no output folder, no chdir)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hydra_compose(config_name, overrides=list(overrides))


def refuse_owned_overrides(overrides: Sequence[str], owned: dict[str, str]) -> None:
    """Refuse a Hydra override of a setting the script sets from its own option (``owned``: key -> option): a later
    ``seed=5`` won over ``--seed 0``'s ``seed=0`` and trained with seed 5, while the JSON recorded seed 0."""
    from lilou.errors import LilouInputError

    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in owned:
            raise LilouInputError(f"override {override}: give it as {owned[key]} (the script records that option's "
                                  "value; an override would win over it unrecorded)")


def git_provenance(repo: Path = REPO) -> dict[str, Any]:
    """Which code produced a result: the commit (``HEAD``), its date, whether the working tree had uncommitted
    changes, and when the run ended (UTC). Every benchmark and ablation JSON carries it so that the report can name,
    per section, the commit and date of the run that produced it. Unknown fields are None (no git, no repository)."""
    from datetime import UTC, datetime

    out: dict[str, Any] = {"commit": None, "commit_date": None, "dirty": None,
                           "run_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}
    try:
        commit, date = subprocess.run(["git", "log", "-1", "--format=%h%n%cI"], cwd=repo, capture_output=True,
                                      text=True, check=True, timeout=30).stdout.split()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    except (OSError, ValueError, subprocess.SubprocessError):
        return out
    out.update(commit=commit, commit_date=date, dirty=bool(dirty))
    return out


def provenance_path(result: Path) -> Path:
    """The side file that holds ``result``'s provenance: ``<stem>.provenance.json`` beside it."""
    return Path(result).with_name(Path(result).stem + ".provenance.json")


def write_provenance(result: Path) -> Path:
    """Write :func:`git_provenance` beside a benchmark's JSON ``result`` (kept apart so that results that are
    lists, like fusion.json and graph.json, keep their format) and return the side file's path."""
    path = provenance_path(result)
    path.write_text(json.dumps(git_provenance(), indent=1) + "\n")
    return path


def describe_provenance(provenance: dict[str, Any] | None) -> str:
    """One line for a report: "commit abc1234 (2026-12-06), run 2026-12-07 04:10 UTC" or that it is unrecorded."""
    if not provenance or not provenance.get("commit"):
        return "commit and date of the run not recorded"
    text = f"commit {provenance['commit']} ({str(provenance.get('commit_date') or '?')[:10]})"
    if provenance.get("dirty"):
        text += " with uncommitted changes"
    return text + f", run {provenance.get('run_at') or 'at an unrecorded time'}"


def result_path(path: Path) -> str:
    """``path`` as the JSON records it: relative to the repository root where it lies inside, else absolute."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def command_line() -> str:
    """The command that ran this script, relative to the repository root where possible."""
    argv = list(sys.argv)
    if argv and Path(argv[0]).is_file():
        path = Path(argv[0]).resolve()
        argv[0] = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
    return " ".join(shlex.quote(a) for a in ["python", *argv])


@contextlib.contextmanager
def cached_kernel_rows() -> Iterator[None]:
    """Parse the NeuSight kernel CSVs once for every fit of a script (each fit would re-read them).

    Patches the names :mod:`lilou.latency.kernel_model.datamodule` imported; the cached objects are
    never modified by the data module (it only indexes them).
    """
    from lilou.latency.kernel_model import datamodule

    original_load, original_build = datamodule.load_kernels, datamodule.build_dataset
    load = functools.lru_cache(maxsize=4)(lambda split, ops, data_dir: original_load(split, ops=ops,
                                                                                     data_dir=data_dir))
    built: dict[int, Any] = {}

    def load_kernels(split, ops=None, data_dir=None):
        return load(split, tuple(ops) if ops else None, data_dir)

    def build_dataset(table):
        if id(table) not in built:
            built[id(table)] = (table, original_build(table))
        return built[id(table)][1]

    datamodule.load_kernels, datamodule.build_dataset = load_kernels, build_dataset
    try:
        yield
    finally:
        datamodule.load_kernels, datamodule.build_dataset = original_load, original_build


@contextlib.contextmanager
def cached_fusion_samples() -> Iterator[None]:
    """Load the fusion dataset's feature tensors once for every fit of a script."""
    from lilou.fusion import datamodule

    original = datamodule.load_split
    cache: dict[tuple, list] = {}

    def load_split(root, split, backends=("eager", "tvm"), families=None):
        key = (str(root), split, tuple(backends), tuple(sorted(families)) if families is not None else None)
        if key not in cache:
            cache[key] = original(root, split, backends, families)
        return list(cache[key])

    datamodule.load_split = load_split
    try:
        yield
    finally:
        datamodule.load_split = original


def data_dir() -> str | None:
    return os.environ.get("LILOU_DATA_DIR")


def fmt(value: Any, digits: int = 1) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def print_table(title: str, rows: Sequence[dict[str, Any]], columns: Sequence[str], digits: int = 1) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        numeric = any(isinstance(r.get(column), (int, float)) for r in rows)
        table.add_column(column, justify="right" if numeric else "left")
    for row in rows:
        table.add_row(*[fmt(row.get(c), digits) for c in columns])
    Console(width=200).print(table)


def write_result(name: str, rows: Sequence[dict[str, Any]], columns: Sequence[str], *, title: str,
                 table_rows: Sequence[dict[str, Any]] | None = None, table_columns: Sequence[str] | None = None,
                 seed: int | None, quick: bool, data: str, started: float, extra: dict[str, Any] | None = None,
                 digits: int = 1, out_dir: Path = RESULTS, command: str | None = None) -> Path:
    """Write ``<name>.csv`` (all ``rows``) and ``<name>.json`` (provenance and the summary table).

    ``command`` is the command recorded (default: this process's command line); a script passes it with the
    defaults it filled in spelled out, so that the report shows, e.g., the training-row subsample it ran with.

    ``table_rows``/``table_columns`` are the printed summary (the one the report shows);
    they default to the CSV rows and columns.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / f"{name}.csv"
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: _csv_value(row.get(c)) for c in columns})
    summary_rows = list(table_rows if table_rows is not None else rows)
    summary_columns = list(table_columns if table_columns is not None else columns)
    meta = {"name": name, "title": title, "command": command or command_line(), "seed": seed, "quick": quick, "data": data,
            "wall_s": round(time.perf_counter() - started, 1), "python": platform.python_version(),
            "provenance": git_provenance(), "data_dir": data_dir_used(),  # LILOU_DATA_DIR, resolved
            "csv": result_path(csv_path), "png": result_path(out_dir / f"{name}.png"),
            "table": {"columns": summary_columns, "digits": digits,
                      "rows": [{c: r.get(c) for c in summary_columns} for r in summary_rows]},
            **(extra or {})}
    (out_dir / f"{name}.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    print_table(title, summary_rows, summary_columns, digits)
    print(f"wrote {csv_path} and {name}.json ({meta['wall_s']} s)")
    return csv_path


def _csv_value(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    return value


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], digits: int = 1) -> str:
    lines = ["| " + " | ".join(columns) + " |",
             "|" + "|".join("---:" if any(isinstance(r.get(c), (int, float)) for r in rows) else "---"
                            for c in columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(c), digits).replace("|", "\\|") for c in columns) + " |")
    return "\n".join(lines)


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path) -> None:
    """Lay out, write (PNG, 120 dpi) and close an ablation figure."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)
