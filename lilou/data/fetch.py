"""Download a dataset's files from their pinned upstream commits, checked against sha256.

Each file is streamed to a temporary file beside its target, hashed on the way,
and renamed into place only when its sha256 (and size, when known) match the
manifest; a mismatch removes the temporary file and raises :class:`ChecksumError`.
Files already present with the right hash are skipped, so an interrupted fetch
resumes where it stopped. A curated mirror (a folder with the mirror's own
``SOURCE``/``UPSTREAM_SHA256SUMS`` notes, such as ``../shared/datasets``) is never
written to: some of its files hold rows back on purpose.

``mirror`` replaces GitHub with a base URL laid out like a Lilou data root
(``<mirror>/<dataset>/<local path>``), e.g. ``file:///srv/datasets``; the tests use
it because this machine cannot reach the network. The manifest hash still applies:
a mirror whose file holds back rows (NeuSight's test kernels) fails the check.
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from lilou.data.paths import data_root
from lilou.data.sources import Dataset, ManifestFile, get_dataset
from lilou.errors import LilouInputError

CHUNK = 1 << 20
TIMEOUT_S = 30.0
RETRIES = 2
USER_AGENT = "lilou-data-fetch"


class FetchError(LilouInputError):
    """A file could not be downloaded (network, HTTP status, missing on the mirror)."""


class ChecksumError(FetchError):
    """A downloaded file does not match the manifest; nothing is left on disk."""


@dataclass
class FetchReport:
    dataset: str
    root: Path
    downloaded: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    not_downloadable: list[str] = field(default_factory=list)  # derived tables and mirror notes
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


def _open(url: str, timeout: float):
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - URLs come from the manifest


def download(url: str, target: Path, entry: ManifestFile, *, timeout: float = TIMEOUT_S,
             retries: int = RETRIES, on_bytes: Callable[[int], None] | None = None) -> int:
    """Fetch ``url`` into ``target`` atomically; returns the bytes written.

    Network errors and 5xx answers are retried ``retries`` times; a 4xx answer or a
    checksum mismatch is not (the same bytes would come back).
    """
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FetchError(f"cannot create {target.parent}: {exc.strerror or exc}") from None
    for attempt in range(retries + 1):
        try:
            return _download_once(url, target, entry, timeout, on_bytes)
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == retries:
                raise FetchError(f"cannot download {url}: HTTP {exc.code} {exc.reason}") from None
        except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, FileNotFoundError) or attempt == retries:
                raise FetchError(f"cannot download {url}: {reason}") from None
        time.sleep(1.0 * (attempt + 1))
    raise AssertionError("unreachable")


def _download_once(url: str, target: Path, entry: ManifestFile, timeout: float,
                   on_bytes: Callable[[int], None] | None) -> int:
    tmp = target.with_name(f".{target.name}.part-{os.getpid()}")
    digest, size = hashlib.sha256(), 0
    try:
        out_file = tmp.open("wb")
    except OSError as exc:  # e.g. LILOU_DATA_DIR points at a read-only mirror
        raise FetchError(f"cannot write {target}: {exc.strerror or exc}") from None
    try:
        with out_file as out, _open(url, timeout) as response:
            for block in iter(lambda: response.read(CHUNK), b""):
                out.write(block)
                digest.update(block)
                size += len(block)
                if on_bytes:
                    on_bytes(len(block))
        if digest.hexdigest() != entry.sha256 or (entry.size is not None and size != entry.size):
            raise ChecksumError(f"checksum mismatch for {entry.path} from {url}: got sha256 "
                                f"{digest.hexdigest()[:16]}... ({size} B), expected {entry.sha256[:16]}... "
                                f"({entry.size if entry.size is not None else '?'} B); file removed")
        os.replace(tmp, target)
        return size
    finally:
        tmp.unlink(missing_ok=True)


def fetch(name: str, data_dir: str | os.PathLike[str] | None = None, files: Iterable[str] | None = None,
          progress: bool = True, mirror: str | None = None, timeout: float = TIMEOUT_S,
          retries: int = RETRIES) -> FetchReport:
    """Download the missing or outdated files of dataset ``name`` into ``<data root>/<name>/``.

    ``files`` restricts the fetch to local paths matching these fnmatch patterns;
    ``mirror`` is a base URL laid out like a data root (default: GitHub at the pinned commits).
    """
    dataset = get_dataset(name)
    root = data_root(data_dir)
    folder = root / name
    report = FetchReport(dataset=name, root=root)
    todo: list[ManifestFile] = []
    for entry in select(dataset, files):
        if not entry.downloadable:
            report.not_downloadable.append(entry.path)
        elif is_present(folder / entry.path, entry):
            report.present.append(entry.path)
        else:
            todo.append(entry)
    if not todo:
        return report
    notes = [e.path for e in dataset.files if e.origin == "notes" and (folder / e.path).is_file()]
    if notes:
        # A curated mirror (its SOURCE/UPSTREAM_SHA256SUMS are never fetched) may hold rows
        # back on purpose; overwriting them with upstream files would leak evaluation data.
        raise LilouInputError(f"{folder} is a curated mirror (it has {notes[0]}) and {len(todo)} of its files "
                              f"differ from upstream (e.g. {todo[0].path}); fetch into another --data-dir")

    with _progress_bar(progress, sum(e.size or 0 for e in todo), f"{name}: {len(todo)} files") as advance:
        for entry in todo:
            report.bytes += download(file_url(dataset, entry, mirror), folder / entry.path, entry,
                                     timeout=timeout, retries=retries, on_bytes=advance)
            report.downloaded.append(entry.path)
    return report


@contextmanager
def _progress_bar(enabled: bool, total: int, label: str) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar in bytes on stderr, or nothing when ``enabled`` is false."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        # Sizes of held-back files are unknown: the total is a lower bound, so let it grow.
        task = bar.add_task(label, total=total or None)
        done = 0

        def advance(n: int) -> None:
            nonlocal done
            done += n
            if total and done > total:
                bar.update(task, total=done)
            bar.update(task, advance=n)

        yield advance
