"""The kernel-measurement table: every source's rows in one schema, cached as parquet, queried lazily.

>>> from lilou.data.kernel_table import kernel_table
>>> rows = kernel_table()                                   # doctest: +SKIP  (a DuckDB relation)
>>> rows.filter("family = 'gemm' AND dtype = 'bf16'").count("*").fetchone()  # doctest: +SKIP

Each source's reader (:mod:`lilou.data.readers`) turns its upstream files into rows of
:mod:`lilou.data.kernel_schema`. Here the rows get their GPU (the database's canonical name),
are checked against the schema, and are written once to ``<cache>/kernel_table/<source>-<key>.parquet``;
``key`` hashes the source files' names, sizes and mtimes, the schema and the GPU database, so a
changed mirror or database rebuilds that source and nothing else. Rows that cannot enter the table
(unknown GPU or dtype, not NVIDIA, held back, memory rows, no latency ...) are counted per reason
in ``<source>-<key>.json``, never dropped without a word. Both are synced to the disk before they are renamed into
place; a part or summary that cannot be read all the same (cut, empty) is a cache miss, rebuilt.

Every query afterwards is DuckDB over the parquet files: column and row filters are pushed down,
so a trainer that wants the BF16 GEMMs never loads the 7 M other rows.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import signal
import threading
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import import_module, resources
from pathlib import Path

import duckdb

from lilou.data.kernel_schema import COLUMN_NAMES, DTYPES, FAMILIES, TIMING_METHODS
from lilou.data.paths import data_root, dataset_dir
from lilou.data.profiles import PROFILE_DATASET, ROWS_FILE
from lilou.data.readers.base import SourceRows, sql_list, sql_string
from lilou.data.sources import DATASETS
from lilou.errors import LilouInputError, interrupted_query

#: Sources of kernel measurements, in table order: dataset name -> reader module.
SOURCES = {name: f"lilou.data.readers.{name}" for name in
           ("neusight", "aiconfigurator", "vidur", "deepbench", "liger_kernel")}
#: Rows Lilou measured itself (`lilou profile ops` + `lilou data add`): a source of the table wherever the data root
#: holds any, after the published ones; never fetched, so no manifest.
LOCAL_SOURCES = {PROFILE_DATASET: "lilou.data.readers.lilou_profile"}
READERS = {**SOURCES, **LOCAL_SOURCES}
SCHEMA_VERSION = 1
CACHE_ENV = "LILOU_CACHE_DIR"

#: Device strings that are not NVIDIA GPUs: their rows stay out of the table, with this reason.
NOT_NVIDIA = ("intel", "amd", "radeon", "instinct")


@dataclass(frozen=True)
class SourceBuild:
    """One source's cached part of the table."""

    name: str
    parquet: Path
    rows: int
    dropped: dict[str, int]   # reason -> rows
    seconds: float            # time the build took (0 when read from the cache)
    cached: bool


def cache_dir() -> Path:
    """``$LILOU_CACHE_DIR`` or ``~/.cache/lilou``."""
    return Path(os.environ.get(CACHE_ENV) or "~/.cache/lilou").expanduser()


def connect() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection for the table: no progress bar, memory bounded for a 24 GB machine."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute("SET memory_limit = '6GB'")
    con.execute(f"SET threads = {max(1, min(os.cpu_count() or 1, 4))}")
    return con


def check_sources(names: Iterable[str] | None, data_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """The wanted source names (when None: the published ones, and the local ones present under the data root);
    an unknown name is a one-line input error."""
    if names is None:
        root = data_root(data_dir)
        return list(SOURCES) + [name for name in LOCAL_SOURCES if any((root / name).glob(f"*/{ROWS_FILE}"))]
    if isinstance(names, str):  # one name, not its letters ("unknown kernel source v, i, d, u, r")
        names = [names]
    wanted = list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in READERS]
    if unknown:
        raise LilouInputError(f"unknown kernel source {', '.join(unknown)}; known: {', '.join(READERS)}")
    return wanted


def build_source(name: str, data_dir: str | os.PathLike[str] | None = None, refresh: bool = False) -> SourceBuild:
    """Read one source into its cached parquet part (or find it already there).

    A file DuckDB cannot parse (truncated, not parquet/CSV) is one line naming the source and
    what to do, never a traceback.
    """
    check_sources([name])
    folder = dataset_dir(name, data_dir)
    _warn_if_partial(name, folder)
    reader = import_module(READERS[name])
    con = connect()
    try:
        return _build(name, reader, folder, con, refresh)
    except RuntimeError as exc:
        if interrupted_query(exc):  # Ctrl-C (or SIGTERM) during the build: stopped, not a bug
            raise KeyboardInterrupt from None
        raise
    except duckdb.Error as exc:
        if isinstance(exc, duckdb.InterruptException):
            raise KeyboardInterrupt from None
        first = str(exc).strip().splitlines()[0]
        raise LilouInputError(f"{name}: cannot read the files in {folder} ({first}): "
                              f"check them with `lilou data verify {name}` and re-fetch with `lilou data fetch {name}`"
                              ) from None
    finally:
        con.close()


def _warn_if_partial(name: str, folder: Path) -> None:
    """A mirror missing some of a source's files gives a table without their rows: said, not silent (a training run
    on it learns from fewer GPUs than the docs' figures)."""
    dataset = DATASETS.get(name)
    if dataset is None:
        return
    data = [f.path for f in dataset.files if f.downloadable and Path(f.path).suffix]  # not the LICENSE
    missing = [path for path in dataset.missing_files(folder) if path in data]
    if missing and len(missing) < len(data):  # none there: the reader says what it cannot find
        warnings.warn(f"{name}: {len(missing)} of {len(data)} data files missing in {folder} (first {missing[0]}): "
                      f"the kernel table is built from the others; `lilou data fetch {name}` completes it", stacklevel=2)


def _build(name: str, reader, folder: Path, con: duckdb.DuckDBPyConnection, refresh: bool) -> SourceBuild:
    rows: SourceRows = reader.read(folder, con)
    key = _cache_key(name, rows.files, folder)
    target = cache_dir() / "kernel_table" / f"{name}-{key}.parquet"
    summary = target.with_suffix(".json")
    if not refresh:
        cached = _cached(name, target, summary, con)
        if cached is not None:
            return cached
    start = time.perf_counter()
    mapped = _with_gpus(con, rows)
    dropped = dict(mapped.filter("drop_reason IS NOT NULL").aggregate("drop_reason, count(*)").fetchall())
    # One partial file per process: two processes building the same part (two benchmarks started together)
    # must not write into one file; the last atomic replace wins and both parts are the same rows.
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    summary_partial = summary.with_name(f"{summary.name}.{os.getpid()}.partial")
    _check_writable(partial)
    columns = ", ".join(f'"{c}"' for c in COLUMN_NAMES)
    # A build that fails, or is stopped (Ctrl-C, SIGTERM), removes its own partial files (a part is tens of MB);
    # one killed outright (SIGKILL) leaves them to prune_stale_parts.
    try:
        with _terminate_as_interrupt():
            try:
                mapped.filter("drop_reason IS NULL").project(columns).write_parquet(str(partial), compression="zstd")
            except duckdb.Error as exc:  # the sources are read here too: only an error writing the part is the cache's
                reason = _write_failure(exc, partial)
                if reason is None:
                    raise
                raise _not_writable(partial.parent, reason) from None
            kept = con.execute(f"SELECT count(*) FROM read_parquet({sql_string(partial)})").fetchone()[0]  # type: ignore[index]
            seconds = time.perf_counter() - start
            try:
                # on the disk before the renames: a crash must not leave a zero-length part or summary in their place
                _sync(partial)
                with summary_partial.open("w", encoding="utf-8") as file:
                    json.dump({"rows": kept, "dropped": dropped, "seconds": round(seconds, 2)}, file, indent=1)
                    file.flush()
                    os.fsync(file.fileno())
                partial.replace(target)
                summary_partial.replace(summary)
                with contextlib.suppress(OSError):  # the renames themselves; not every file system syncs a folder
                    _sync(target.parent)
            except OSError as exc:
                raise _not_writable(partial.parent, exc.strerror or str(exc)) from None
    finally:
        for path in (partial, partial.with_name(DUCKDB_TMP + partial.name), summary_partial):
            path.unlink(missing_ok=True)  # gone already after a build that succeeded
    prune_stale_parts(name, target)
    return SourceBuild(name, target, kept, dropped, seconds, cached=False)


def _cached(name: str, target: Path, summary: Path, con: duckdb.DuckDBPyConnection) -> SourceBuild | None:
    """The part already in the cache, or None where there is none or it cannot be read: a zero-length or cut summary
    or part (a crash before it reached the disk, a full disk, a CI cache restore cut off) is rebuilt, and so
    replaced; it failed every later run with an internal JSONDecodeError or DuckDB error until deleted by hand."""
    if not (target.is_file() and summary.is_file()):
        return None
    try:
        meta = json.loads(summary.read_text(encoding="utf-8"))
        rows, dropped = meta["rows"], meta["dropped"]
        if not (isinstance(rows, int) and isinstance(dropped, dict)
                and all(isinstance(k, str) and isinstance(v, int) for k, v in dropped.items())):
            return None
        # the row count is in the parquet footer, which a cut file lacks: no data is read
        stored = con.execute(f"SELECT count(*) FROM read_parquet({sql_string(target)})").fetchall()[0][0]
    except duckdb.InterruptException:
        raise
    except (OSError, ValueError, KeyError, TypeError, duckdb.Error):  # ValueError: JSON, UTF-8
        return None
    return SourceBuild(name, target, rows, dropped, 0.0, cached=True) if stored == rows else None


class CacheNotWritableError(LilouInputError):
    """The cache folder cannot hold the table's parts: the environment's fault, not one source's."""


def _check_writable(partial: Path) -> None:
    """Create ``partial`` (the build writes it next), or say in one line that the cache folder is not writable."""
    try:
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.touch()
    except OSError as exc:
        raise _not_writable(partial.parent, exc.strerror or str(exc)) from None


def _not_writable(folder: Path, reason: str) -> CacheNotWritableError:
    """The one line of a cache that cannot be written (read-only, full): not the sources' fault, whose error sent
    the user to verify and re-download healthy data."""
    return CacheNotWritableError(f"cannot write the kernel table's cache in {folder} ({reason}): set {CACHE_ENV} to a "
                                 "writable folder (default ~/.cache/lilou)")


#: Errors of a write that the disk refused (full, over quota, over a size limit, read-only).
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def _write_failure(exc: duckdb.Error, partial: Path) -> str | None:
    """Why DuckDB could not write ``partial`` (``No space left on device``), or None where ``exc`` is not a failure to
    write it (a source file that cannot be read, an interruption)."""
    if isinstance(exc, duckdb.InterruptException):
        return None
    text = str(exc)
    # DuckDB 1.x: 'IO Error: Could not write file "<path>": No space left on device'; 2.x adds the errno as JSON
    number = re.search(r'"errno"\s*:\s*"?(\d+)', text)
    if number and int(number.group(1)) in WRITE_ERRNOS:
        return os.strerror(int(number.group(1)))
    if partial.name not in text:
        return None
    if number:
        return os.strerror(int(number.group(1)))
    tail = text.strip().splitlines()[0].rsplit(": ", 1)[-1].strip(' "}')
    return tail or type(exc).__name__


def _sync(path: Path) -> None:
    """Flush ``path`` (a file or a folder) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _terminate_as_interrupt():
    """SIGTERM (``timeout``, ``docker stop``, a CI job cancelled) stops the block as Ctrl-C does, so that its
    cleanup runs; DuckDB reports either as an interrupted query. Only in the main thread, where handlers live."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def build_table(sources: Iterable[str] | None = None, data_dir: str | os.PathLike[str] | None = None,
                refresh: bool = False) -> list[SourceBuild]:
    """Every wanted source's cached part (built where missing or stale)."""
    return [build_source(name, data_dir, refresh) for name in check_sources(sources, data_dir)]


def kernel_table(sources: Iterable[str] | None = None, data_dir: str | os.PathLike[str] | None = None,
                 con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyRelation:
    """The table (the wanted sources) as a lazy DuckDB relation over the cached parquet parts."""
    parts = [build.parquet for build in build_table(sources, data_dir)]
    con = con or _shared_connection()
    return con.sql(f"SELECT * FROM read_parquet({sql_list(parts)}, union_by_name = true)")


@cache
def _shared_connection() -> duckdb.DuckDBPyConnection:
    return connect()


def load_rows(where: str | None = None, columns: Sequence[str] | None = None, sources: Iterable[str] | None = None,
              data_dir: str | os.PathLike[str] | None = None):
    """Rows of the table as a pyarrow Table: ``where`` is a SQL condition over the columns."""
    relation = kernel_table(sources, data_dir)
    if where:
        relation = relation.filter(where)
    if isinstance(columns, str):  # one column, not its letters
        columns = [columns]
    if columns:
        unknown = [c for c in columns if c not in COLUMN_NAMES]
        if unknown:
            raise LilouInputError(f"not columns of the kernel table: {', '.join(unknown)}")
        relation = relation.project(", ".join(f'"{c}"' for c in columns))
    return relation.to_arrow_table()


# ------------------------------------------------------------------------------------- GPUs


def _with_gpus(con: duckdb.DuckDBPyConnection, rows: SourceRows) -> duckdb.DuckDBPyRelation:
    """``rows`` with ``gpu`` filled from the database and schema checks folded into ``drop_reason``."""
    from lilou.hardware import find_gpu

    con.register("lilou_reader_rows", rows.relation)
    devices = [d for (d,) in con.sql("SELECT DISTINCT device FROM lilou_reader_rows WHERE gpu IS NULL").fetchall()]
    mapping: list[tuple[str, str | None, str | None]] = []
    for device in devices:
        gpu, reason = None, None
        if device is None:
            reason = "no device recorded"
        elif any(word in device.lower() for word in NOT_NVIDIA):
            reason = f"not an NVIDIA GPU ({device})"
        else:
            try:
                gpu = rows.gpu_overrides.get(device) or find_gpu(device).name
            except LilouInputError:
                reason = f"unknown GPU {device!r}"
        mapping.append((device, gpu, reason))
    for gpu in set(rows.gpu_overrides.values()):
        find_gpu(gpu)  # an override naming no database entry is a bug here, not user input
    con.execute("CREATE OR REPLACE TEMP TABLE lilou_device_gpu (device VARCHAR, mapped VARCHAR, reason VARCHAR)")
    if mapping:
        con.executemany("INSERT INTO lilou_device_gpu VALUES (?, ?, ?)", mapping)
    dtypes = ", ".join(f"'{d}'" for d in DTYPES)
    families = ", ".join(f"'{f}'" for f in FAMILIES)
    timings = ", ".join(f"'{t}'" for t in TIMING_METHODS)
    # A reader that names GPUs itself may use any alias: canonical names from the database.
    named = [g for (g,) in con.sql("SELECT DISTINCT gpu FROM lilou_reader_rows WHERE gpu IS NOT NULL").fetchall()]
    con.execute("CREATE OR REPLACE TEMP TABLE lilou_named_gpu (named VARCHAR, canonical VARCHAR)")
    if named:
        con.executemany("INSERT INTO lilou_named_gpu VALUES (?, ?)", [(g, find_gpu(g).name) for g in named])
    gpu = "coalesce(n.canonical, m.mapped)"
    held_back = "(starts_with(gpu, 'h100') OR gpu = 'l4')"  # kernel_schema.is_held_back, in SQL
    columns = ", ".join(f'r."{c}"' if c != "gpu" else f"{gpu} AS gpu" for c in COLUMN_NAMES)
    joined = (f"SELECT {columns}, coalesce(r.drop_reason, m.reason) AS drop_reason "
              "FROM lilou_reader_rows r LEFT JOIN lilou_device_gpu m ON r.device = m.device AND r.gpu IS NULL "
              "LEFT JOIN lilou_named_gpu n ON r.gpu = n.named")
    return con.sql(
        f"SELECT * REPLACE (CASE WHEN drop_reason IS NOT NULL THEN drop_reason "
        f"WHEN {held_back} THEN 'H100/L4 row: held back for independent evaluation' "
        f"WHEN dtype IS NULL OR dtype NOT IN ({dtypes}) THEN concat('unknown dtype ', coalesce(dtype, 'null')) "
        f"WHEN family NOT IN ({families}) THEN concat('unknown family ', family) "
        f"WHEN timing NOT IN ({timings}) THEN concat('unknown timing ', timing) "
        "WHEN latency_ms IS NULL OR NOT isfinite(latency_ms) OR latency_ms <= 0 THEN 'no positive latency' "
        f"END AS drop_reason) FROM ({joined})")


# ------------------------------------------------------------------------------------ cache

#: Hex characters of a part's cache key (``<source>-<key>.parquet``).
KEY_CHARS = 16
#: Older parts of a source kept beside the current one (another checkout or a benchmark still running on one).
KEEP_OLDER_PARTS = 2
#: A partial file older than this (s) is left by a build that died; a running build renames its own in minutes.
STALE_PARTIAL_S = 6 * 3600
#: The prefix of the file DuckDB writes a parquet file into before renaming it to the name asked for.
DUCKDB_TMP = "tmp_"


def prune_stale_parts(name: str, current: Path) -> list[Path]:
    """Delete what earlier builds of ``name`` left in the cache: all but the :data:`KEEP_OLDER_PARTS` newest
    older parts (each about 40 MB for AIConfigurator; every new mirror copy, reader or GPU database made one),
    with their summaries, and partial files of builds that died. Returns the deleted paths."""
    folder = current.parent
    # another process building the same source renames or removes its files while this one looks: a file gone
    # between the listing and its stat is skipped (it made `lilou data` fail with FileNotFoundError)
    stamped = [(p, _mtime(p)) for p in folder.glob(f"{name}-*.parquet") if p != current and _is_part_of(p, name)]
    older = [p for p, _ in sorted(((p, t) for p, t in stamped if t is not None), key=lambda pt: pt[1], reverse=True)]
    doomed = [path for part in older[KEEP_OLDER_PARTS:] for path in (part, part.with_suffix(".json"))]
    now = time.time()
    # DuckDB writes a part into tmp_<partial file> and renames it: a build killed while writing leaves that one
    partials = [*folder.glob(f"{name}-*.partial"), *folder.glob(f"{DUCKDB_TMP}{name}-*.partial")]
    doomed += [p for p in partials
               if _is_part_of(p.with_name(p.name.removeprefix(DUCKDB_TMP)), name)
               and now - (_mtime(p) or now) > STALE_PARTIAL_S]
    deleted = []
    for path in doomed:
        try:
            path.unlink()
            deleted.append(path)
        except FileNotFoundError:  # another process pruned it first
            pass
    return deleted


def _mtime(path: Path) -> float | None:
    """``path``'s modification time, or None where it is gone (another process renamed or removed it)."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def _is_part_of(path: Path, name: str) -> bool:
    """True when ``path`` is a part of ``name`` itself (``fp8-...`` is not a part of ``fp``)."""
    key = path.name[len(name) + 1:].split(".", 1)[0]
    return len(key) == KEY_CHARS and all(c in "0123456789abcdef" for c in key)


def _cache_key(name: str, files: Sequence[Path], folder: Path) -> str:
    digest = hashlib.sha256(f"{SCHEMA_VERSION}:{name}".encode())
    for path in sorted(files):
        stat = path.stat()
        digest.update(f"{path.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    digest.update(_reader_fingerprint(name))
    return digest.hexdigest()[:KEY_CHARS]


@cache
def _reader_fingerprint(name: str) -> bytes:
    """The code and data that shape a source's rows: its reader, the shared modules, the GPU database (its
    data file and the code that looks names up in it)."""
    here = Path(__file__).parent
    paths = [here / "readers" / f"{name}.py", here / "readers" / "base.py", here / "kernel_schema.py", Path(__file__)]
    if name == "deepbench":
        paths.append(here / "readers" / "deepbench_xlsx.py")
    if name == PROFILE_DATASET:
        paths.append(here / "profiles.py")
    hardware = resources.files("lilou.hardware")
    text = b"".join(p.read_bytes() for p in paths if p.is_file())
    # GPU names are mapped by the database's code as well as its data file.
    return text + b"".join(hardware.joinpath(f).read_bytes() for f in ("gpus.yaml", "database.py", "names.py"))


def present(name: str, data_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether the source's folder is on disk under the data root."""
    return (data_root(data_dir) / name).is_dir()


# ---------------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class SourceSummary:
    """What one source contributes to the table (``lilou data list``)."""

    name: str
    rows: int
    gpus: list[str]
    dtypes: list[str]
    families: list[str]
    timing: list[str]
    dropped: dict[str, int]
    build: SourceBuild


def summarise(build: SourceBuild) -> SourceSummary:
    """Distinct GPUs, dtypes, families and timing methods of one cached source part."""
    con = _shared_connection()
    scan = f"read_parquet({sql_string(build.parquet)})"

    def distinct(column: str) -> list[str]:
        return [v for (v,) in con.execute(f'SELECT DISTINCT "{column}" FROM {scan} ORDER BY 1').fetchall()]

    return SourceSummary(name=build.name, rows=build.rows, gpus=distinct("gpu"), dtypes=distinct("dtype"),
                         families=distinct("family"), timing=distinct("timing"), dropped=build.dropped, build=build)
