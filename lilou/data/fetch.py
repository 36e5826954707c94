"""Download a dataset's files from their pinned upstream commits with pooch, checked against sha256.

Each dataset becomes a :class:`pooch.Pooch` whose registry is its manifest (local
path -> ``sha256:<hash>``) and whose URLs are :meth:`Dataset.url` (the raw file at
the pinned commit). pooch streams each file to a temporary file beside its target
and moves it into place only when the hash matches; a mismatch deletes the
temporary file and raises :class:`ChecksumError`. Files already present with the
right hash are skipped, so an interrupted fetch resumes where it stopped, and a
wrong local copy is replaced. A curated mirror (a folder with the mirror's own
``SOURCE``/``UPSTREAM_SHA256SUMS`` notes, such as ``../shared/datasets``) is never
written to: some of its files hold rows back on purpose.

``mirror`` replaces GitHub with a base URL laid out like a Lilou data root
(``<mirror>/<dataset>/<local path>``), e.g. ``file:///srv/datasets``; the tests use
it because this machine cannot reach the network (pooch has no ``file://``
downloader, so :class:`_Downloader` copies those itself). The manifest hash still
applies: a mirror whose file holds back rows (NeuSight's test kernels,
Liger-Kernel's benchmark table) fails the check.

:func:`verify` hashes the files on disk against the manifest without downloading.
"""
from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlparse

from lilou.data.paths import data_root, dataset_dir
from lilou.data.sources import RAW_GITHUB, Dataset, ManifestFile, get_dataset
from lilou.errors import LilouInputError

if TYPE_CHECKING:  # pooch (with tqdm) takes 0.1 s to import: every CLI command would pay it
    import pooch

CHUNK = 1 << 20
TIMEOUT_S = 30.0
RETRIES = 2
USER_AGENT = "lilou-data-fetch"
CURATED_NOTES = ("SOURCE", "UPSTREAM_SHA256SUMS")  # only a curated mirror has these
#: What each dataset's readers glob (relative to its folder): a file matching one of these that the manifest does
#: not list would be read as measurements, so :func:`verify` reports it as unexpected. Readers of the other files
#: (llm_energy, wattgpu, DeepBench's tidy tables, NeuSight's test kernels) open fixed paths.
READER_GLOBS: dict[str, tuple[str, ...]] = {
    "neusight": ("kernels/train/*/*.csv", "e2e/*/*.json", "device_configs/*.json"),
    "deepbench": ("results/**/DeepBench_NV_*.xlsx",),
    "liger_kernel": ("all_benchmark_data*.csv",),
    "aiconfigurator": ("data/*/*/*/*/*.parquet",),
    "vidur": ("compute/*/*/*/mlp.csv",),
}


class FetchError(LilouInputError):
    """A file could not be downloaded (network, HTTP status, missing on the mirror, unwritable target)."""


class ChecksumError(FetchError):
    """A downloaded file does not match the manifest; nothing is left on disk.

    :func:`fetch` still downloads the other files first; ``report`` says what it did.
    """

    report: FetchReport | None = None


class VerifyError(LilouInputError):
    """Files on disk are missing or differ from the manifest."""


@dataclass
class FetchReport:
    dataset: str
    root: Path
    downloaded: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    not_downloadable: list[str] = field(default_factory=list)  # derived tables and mirror notes
    unrestored: list[str] = field(default_factory=list)  # derived tables on disk that differ: no fetch restores them
    bytes: int = 0


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def file_url(dataset: Dataset, entry: ManifestFile, mirror: str | None = None) -> str:
    if mirror:
        return f"{mirror.rstrip('/')}/{quote(dataset.name)}/{quote(entry.path)}"
    return dataset.url(entry)


def select(dataset: Dataset, files: Iterable[str] | None) -> list[ManifestFile]:
    """Manifest entries whose local path matches one of ``files`` (fnmatch patterns); all if None."""
    entries = list(dataset.files)
    if files is None:
        return entries
    chosen: dict[str, ManifestFile] = {}
    for pattern in files:
        hits = [e for e in entries if fnmatch.fnmatchcase(e.path, pattern)]
        if not hits:
            raise LilouInputError(f"no file of {dataset.name} matches {pattern!r}")
        chosen.update((e.path, e) for e in hits)
    return [e for e in entries if e.path in chosen]


def is_present(path: Path, entry: ManifestFile) -> bool:
    """True when ``path`` already holds the manifest's version of the file."""
    if not path.is_file() or (entry.size is not None and path.stat().st_size != entry.size):
        return False
    return sha256_file(path) == entry.sha256


def make_pooch(dataset: Dataset, folder: Path, entries: Iterable[ManifestFile],
               mirror: str | None = None) -> pooch.Pooch:
    """A pooch over ``folder`` whose registry is the downloadable part of ``entries``.

    The base URL is the pinned upstream's raw URL (or the mirror's dataset folder);
    every file also gets its own URL, since local and upstream paths differ.
    """
    entries = [e for e in entries if e.downloadable]
    if mirror:
        base = f"{mirror.rstrip('/')}/{quote(dataset.name)}/"
    elif len(dataset.upstreams) == 1:
        (upstream,) = dataset.upstreams.values()
        base = upstream.raw_url("")
    else:  # llm_energy: several repositories, each file names its own
        base = f"{RAW_GITHUB}/"
    import pooch

    return pooch.create(path=folder, base_url=base,
                        registry={e.path: f"sha256:{e.sha256}" for e in entries},
                        urls={e.path: file_url(dataset, e, mirror) for e in entries},
                        retry_if_failed=0)  # retries are ours: a 4xx or a bad hash is not retried


class _Progress:
    """The tqdm-like object pooch.HTTPDownloader drives, summed into one rich task.

    HTTPDownloader counts whole chunks, then resets and adds the real total: the
    per-file count is kept so ``reset`` can take it back out of the overall bar.
    """

    def __init__(self, bar, task, total: int) -> None:
        self._bar, self._task, self._total = bar, task, total
        self._file = 0
        self._done = 0
        self.total = 0  # set per file by HTTPDownloader; unused

    def update(self, n: int) -> None:
        if self.total:  # HTTPDownloader counts whole chunks: never past the file's length
            n = max(0, min(n, self.total - self._file))
        self._file += n
        self._advance(n)

    def reset(self) -> None:
        self._advance(-self._file)
        self._file = 0

    def close(self) -> None:
        self._file = 0
        self.total = 0

    def _advance(self, n: int) -> None:
        self._done += n
        if self._total and self._done > self._total:  # held-back files have no size: let it grow
            self._total = self._done
            self._bar.update(self._task, total=self._total)
        self._bar.update(self._task, advance=n)


class _Downloader:
    """pooch downloader: ``file://`` copied here, ``http(s)://`` through :class:`pooch.HTTPDownloader`.

    It remembers the sha256 and size of what it wrote, so a checksum error can say what came back.
    """

    def __init__(self, timeout: float, progress: _Progress | None) -> None:
        self.timeout = timeout
        self.progress = progress
        self.got: dict[str, tuple[str, int]] = {}
        umask = os.umask(0o022)
        os.umask(umask)
        self.mode = 0o666 & ~umask  # what open() would give; pooch's temporary file is private (0600)

    def __call__(self, url: str, output_file: str, pup: pooch.Pooch | None, check_only: bool = False):
        scheme = urlparse(url).scheme
        if scheme == "file":
            from urllib.request import url2pathname  # urllib.request loads http.client and ssl: only here

            path = Path(url2pathname(urlparse(url).path))  # it unquotes
            if check_only:
                return path.is_file()
            self._copy(path, url, output_file)
        elif scheme in ("http", "https"):
            import pooch

            http = pooch.HTTPDownloader(progressbar=self.progress or False, chunk_size=CHUNK,
                                        timeout=self.timeout, headers={"User-Agent": USER_AGENT})
            result = http(url, output_file, pup, check_only=check_only)
            if check_only:
                return result
        else:
            raise FetchError(f"cannot download {url}: unsupported URL scheme {scheme!r} (use https:// or file://)")
        out = Path(output_file)
        os.chmod(out, self.mode)  # the temporary file becomes the target
        self.got[url] = (sha256_file(out), out.stat().st_size)
        return None

    def _copy(self, path: Path, url: str, output_file: str) -> None:
        try:
            source = path.open("rb")
        except FileNotFoundError:
            raise FetchError(f"cannot download {url}: not on the mirror; check --mirror") from None
        except OSError as exc:
            raise FetchError(f"cannot download {url}: {exc.strerror or exc}") from None
        with source, open(output_file, "wb") as out:
            for block in iter(lambda: source.read(CHUNK), b""):
                out.write(block)
                if self.progress:
                    self.progress.update(len(block))
        if self.progress:
            self.progress.close()


def fetch(name: str, data_dir: str | os.PathLike[str] | None = None, files: Iterable[str] | None = None,
          progress: bool = True, mirror: str | None = None, timeout: float = TIMEOUT_S,
          retries: int = RETRIES) -> FetchReport:
    """Download the missing or outdated files of dataset ``name`` into ``<data root>/<name>/``.

    ``files`` restricts the fetch to local paths matching these fnmatch patterns;
    ``mirror`` is a base URL laid out like a data root (default: GitHub at the pinned commits).
    Network errors and 5xx answers are retried ``retries`` times; a 4xx answer, a
    file missing on a mirror or a checksum mismatch is not (the same bytes would come back).
    """
    dataset = get_dataset(name)
    root = data_root(data_dir)
    folder = root / name
    report = FetchReport(dataset=name, root=root)
    todo: list[ManifestFile] = []
    for entry in select(dataset, files):
        if not entry.downloadable:
            report.not_downloadable.append(entry.path)
            path = folder / entry.path
            if entry.sha256 is not None and path.is_file() and sha256_file(path) != entry.sha256:
                report.unrestored.append(entry.path)
        elif is_present(folder / entry.path, entry):
            report.present.append(entry.path)
        else:
            todo.append(entry)
    if not todo:
        return report
    notes = [n for n in CURATED_NOTES if (folder / n).is_file()]
    if notes:
        # A curated mirror (its SOURCE/UPSTREAM_SHA256SUMS are never fetched) may hold rows
        # back on purpose; overwriting them with upstream files would leak evaluation data.
        raise LilouInputError(f"{folder} is a curated mirror (it has {notes[0]}) and {len(todo)} of its files "
                              f"differ from upstream (e.g. {todo[0].path}); fetch into another --data-dir")

    pup = make_pooch(dataset, folder, todo, mirror)
    with _progress_bar(progress, sum(e.size or 0 for e in todo), f"{name}: {len(todo)} files") as bar, \
            _quiet_pooch():
        downloader = _Downloader(timeout, bar)
        bad: list[ChecksumError] = []
        for entry in todo:
            try:
                _fetch_one(pup, downloader, dataset, entry, folder, retries)
            except ChecksumError as exc:  # the next file may be fine; network errors stop here
                bad.append(exc)
                continue
            report.bytes += (folder / entry.path).stat().st_size
            report.downloaded.append(entry.path)
    if bad:
        more = f" ({len(bad) - 1} more files failed the check)" if len(bad) > 1 else ""
        error = ChecksumError(f"{bad[0]}{more}")
        error.report = report
        raise error
    return report


def _fetch_one(pup: pooch.Pooch, downloader: _Downloader, dataset: Dataset, entry: ManifestFile,
               folder: Path, retries: int) -> None:
    import requests.exceptions

    url = pup.get_url(entry.path)
    target = folder / entry.path
    for attempt in range(retries + 1):
        try:
            pup.fetch(entry.path, downloader=downloader)
            return
        except ValueError as exc:  # pooch's hash check (or a malformed URL); the temporary file is gone
            got = downloader.got.get(url)
            if got is None or got[0] == entry.sha256:
                raise FetchError(f"cannot download {dataset.name}/{entry.path}: {exc}") from None
            raise ChecksumError(_mismatch(dataset, entry, url, *got)) from None
        except requests.exceptions.HTTPError as exc:
            code = exc.response.status_code if exc.response is not None else 0
            if code < 500 or attempt == retries:
                reason = exc.response.reason if exc.response is not None else exc
                raise FetchError(f"cannot download {dataset.name}/{entry.path} from {url}: HTTP {code} {reason}"
                                 f"{'; check --mirror' if code == 404 else ''}") from None
        except requests.exceptions.RequestException as exc:
            if attempt == retries:
                raise FetchError(f"cannot download {dataset.name}/{entry.path} from {url}: "
                                 f"{type(exc).__name__}; check the network or use --mirror") from None
        except OSError as exc:  # e.g. --data-dir is read-only
            raise FetchError(f"cannot write {target}: {exc.strerror or exc}; choose another --data-dir") from None
        if downloader.progress:
            downloader.progress.reset()
        time.sleep(1.0 * (attempt + 1))


def _mismatch(dataset: Dataset, entry: ManifestFile, url: str, digest: str, size: int) -> str:
    expected_size = entry.size if entry.size is not None else "?"
    if entry.origin == "held-back" and url.startswith("file:"):
        hint = "its rows are held back in curated mirrors, so fetch it from upstream (no --mirror)"
    else:
        hint = "the source is corrupt or not the pinned version: retry, or fetch from upstream (no --mirror)"
    return (f"checksum mismatch for {dataset.name}/{entry.path} from {url}: got sha256 {digest[:16]}... "
            f"({size} B), expected {entry.sha256[:16]}... ({expected_size} B); nothing was written; {hint}")


@contextmanager
def _quiet_pooch() -> Iterator[None]:
    """pooch logs every download at INFO on stderr; the progress bar says enough."""
    import pooch

    logger = pooch.get_logger()
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextmanager
def _progress_bar(enabled: bool, total: int, label: str) -> Iterator[_Progress | None]:
    """A rich progress bar in bytes on stderr, or None when ``enabled`` is false."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        # Sizes of held-back files are unknown: the total is a lower bound, so it grows.
        task = bar.add_task(label, total=total or None)
        yield _Progress(bar, task, total)


# -------------------------------------------------------------------------- verify


@dataclass
class VerifyReport:
    dataset: str
    folder: Path
    ok: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)            # downloadable, not on disk
    mismatched: dict[str, str] = field(default_factory=dict)    # path -> why
    held_back: list[str] = field(default_factory=list)          # a curated mirror's filtered copies (expected)
    unchecked: list[str] = field(default_factory=list)          # notes, derived tables not on disk
    unexpected: list[str] = field(default_factory=list)         # not in the manifest, but a reader would read them

    @property
    def problems(self) -> int:
        return len(self.missing) + len(self.mismatched) + len(self.unexpected)


def verify(name: str, data_dir: str | os.PathLike[str] | None = None,
           files: Iterable[str] | None = None) -> VerifyReport:
    """Hash the files of ``name`` on disk against the manifest; nothing is downloaded."""
    dataset = get_dataset(name)
    entries = select(dataset, files)
    folder = dataset_dir(name, data_dir)
    report = VerifyReport(dataset=name, folder=folder)
    curated = any((folder / n).is_file() for n in CURATED_NOTES)
    for entry in entries:
        path = folder / entry.path
        if entry.sha256 is None:  # the mirror's notes
            report.unchecked.append(entry.path)
        elif not path.is_file():
            (report.missing if entry.downloadable else report.unchecked).append(entry.path)
        elif (digest := sha256_file(path)) == entry.sha256:
            report.ok.append(entry.path)
        elif entry.origin == "held-back" and curated and entry.mirror_sha256 in (None, digest):
            report.held_back.append(entry.path)  # the mirror keeps some rows back on purpose: its filtered copy
        elif entry.origin == "held-back" and curated:  # neither the upstream file nor the mirror's filtered copy
            report.mismatched[entry.path] = "sha256 differs from the upstream file and from the curated mirror's copy"
        else:
            size = path.stat().st_size
            if entry.size is not None and size < entry.size:
                why = f"truncated ({size} of {entry.size} B)"
            elif entry.size is not None and size != entry.size:
                why = f"{size} B, expected {entry.size} B"
            else:
                why = "sha256 differs"
            report.mismatched[entry.path] = why
    report.unexpected = unexpected_files(dataset, folder, files)
    return report


def unexpected_files(dataset: Dataset, folder: Path, files: Iterable[str] | None = None) -> list[str]:
    """Files under ``folder`` that a reader of ``dataset`` globs (:data:`READER_GLOBS`) but its manifest does not
    list (restricted to the fnmatch patterns ``files`` where given): they would be read as if published."""
    listed = {entry.path for entry in dataset.files}
    found = {path.relative_to(folder).as_posix() for pattern in READER_GLOBS.get(dataset.name, ())
             for path in folder.glob(pattern) if path.is_file()}
    extra = sorted(found - listed)
    if files is not None:
        patterns = list(files)
        extra = [path for path in extra if any(fnmatch.fnmatchcase(path, p) for p in patterns)]
    return extra
