"""`lilou data list|fetch|verify|add`: the registered datasets, downloading them with checksums, and adding a GPU
profile that `lilou profile ops` measured."""
from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

from lilou.commands._common import add_format_option, console, new_table, print_json
from lilou.data.paths import ENV_VAR, data_root
from lilou.data.sources import DATASETS, Dataset, get_dataset
from lilou.errors import LilouInputError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("data", help="list or fetch the datasets of real measurements")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    listing = actions.add_parser("list", help="registered datasets and whether they are on disk")
    _add_data_dir(listing)
    add_format_option(listing)
    listing.set_defaults(handler=run_list)

    fetch = actions.add_parser("fetch", help="download a dataset from its pinned upstream commit (sha256-checked)")
    fetch.add_argument("name", choices=list(DATASETS), metavar="NAME", help=f"one of: {', '.join(DATASETS)}")
    _add_data_dir(fetch)
    fetch.add_argument("--files", nargs="+", metavar="PATTERN", default=None,
                       help="only these local paths (fnmatch patterns, e.g. 'kernels/train/linear/*')")
    fetch.add_argument("--mirror", metavar="URL", default=None,
                       help="base URL laid out like a data root (e.g. file:///srv/datasets) instead of GitHub")
    fetch.add_argument("--quiet", action="store_true", help="no progress bar")
    fetch.set_defaults(handler=run_fetch)

    verify = actions.add_parser("verify", help="hash a dataset's files on disk against its manifest")
    verify.add_argument("name", choices=list(DATASETS), metavar="NAME", help=f"one of: {', '.join(DATASETS)}")
    _add_data_dir(verify)
    verify.add_argument("--files", nargs="+", metavar="PATTERN", default=None,
                        help="only these local paths (fnmatch patterns)")
    verify.set_defaults(handler=run_verify)

    add = actions.add_parser("add", help="add a GPU profile measured by `lilou profile ops` to the kernel table")
    add.add_argument("folder", metavar="DIR", help="the --out folder of `lilou profile ops`")
    _add_data_dir(add)
    add.add_argument("--name", default=None, help="its folder name under <data root>/lilou_profile (default: DIR's)")
    add.add_argument("--force", action="store_true", help="replace a profile already added under that name")
    add.set_defaults(handler=run_add)


def run_add(args: argparse.Namespace) -> int:
    from lilou.data.kernel_schema import is_held_back
    from lilou.data.profiles import add_profile

    profile, target, gpu = add_profile(args.folder, args.data_dir, args.name, args.force)
    out = console()
    out.print(f"{profile.rows} rows measured on {profile.device} ({gpu}) added: {target}", highlight=False)
    if is_held_back(gpu):
        out.print(f"  {gpu} rows are held back from every source for independent evaluation: the table keeps them "
                  "out of training", highlight=False)
    out.print(f"  the kernel table reads them as the source lilou_profile; retrain with {retrain_hint(target.parents[1])}",
              highlight=False)
    return 0


def retrain_hint(root: Path) -> str:
    """`make train-kernels`, with LILOU_DATA_DIR where training would read another root, and the published
    sources the root lacks (training reads them all from the same root)."""
    from lilou.data.kernel_table import SOURCES

    same = root.resolve() == data_root().resolve()
    hint = "`make train-kernels`" if same else f"`LILOU_DATA_DIR={root} make train-kernels`"
    missing = [name for name in SOURCES if not (root / name).is_dir()]
    if missing:
        hint += (f", once this root also holds the published sources it lacks ({', '.join(missing)}): "
                 f"`lilou data fetch NAME --data-dir {root}`")
    return hint


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", metavar="DIR", default=None,
                        help="data root (default: $LILOU_DATA_DIR, <repo>/datasets, ~/.cache/lilou/datasets)")


def _status(dataset: Dataset, root: Path) -> dict:
    folder = root / dataset.name
    # Derived tables and the mirror's notes cannot be fetched: "complete" means every downloadable file.
    files = [f for f in dataset.files if f.downloadable]
    present = sum(1 for f in files if (folder / f.path).is_file())
    known = [f.size for f in files if f.size is not None]
    state = "absent" if present == 0 else "complete" if present == len(files) else "partial"
    return {
        "name": dataset.name,
        "description": dataset.description,
        "licence": dataset.licence,
        "repository": dataset.repository,
        "commit": dataset.commit,
        "files": len(files),
        "local_only": len(dataset.files) - len(files),
        "bytes": sum(known),
        "bytes_known": len(known) == len(files),  # held-back files have no published size
        "present": state,
        "files_present": present,
        "root": str(root),
    }


def run_list(args: argparse.Namespace) -> int:
    """The listing, table or JSON; exit 2 (after it) when kernel sources are on disk and none of them reads."""
    root = data_root(args.data_dir)
    _fail_when_named_root_is_missing(args.data_dir, root)
    rows = [_listing(dataset, root) for dataset in DATASETS.values()] + _local_listings(root)
    if args.format == "json":
        print_json(rows)
    else:
        _print_table(rows, root)
    _fail_when_nothing_reads(rows, root)
    return 0


def _fail_when_named_root_is_missing(data_dir: str | None, root: Path) -> None:
    """A data root the user named (``--data-dir`` or $LILOU_DATA_DIR) that is not a folder is a typo or an unmounted
    mirror: listing every source "absent" with exit 0 told a script the mirror was fine but empty. The default root
    may be missing (nothing fetched yet) and is listed as it is."""
    if not (data_dir or os.environ.get(ENV_VAR)) or root.is_dir():
        return
    given = f"--data-dir {data_dir}" if data_dir else f"{ENV_VAR}={os.environ[ENV_VAR]}"
    if root.exists():
        raise LilouInputError(f"data root {root} ({given}) is not a folder")
    raise LilouInputError(f"data root {root} ({given}) does not exist; `lilou data fetch NAME --data-dir {root}` "
                          "creates it")


def _fail_when_nothing_reads(rows: list[dict], root: Path) -> None:
    """A data root whose kernel sources are all unreadable (a wrong folder, damaged files) was listed with exit 0, so
    a script checking a mirror saw success; the listing still shows each source's reason."""
    on_disk = [row for row in rows if row["kind"] == "kernels" and row["present"]]
    failed = [row for row in on_disk if row.get("error")]
    if on_disk and len(failed) == len(on_disk):
        raise LilouInputError(f"none of the {len(on_disk)} kernel source(s) on disk under {root} can be read "
                              f"(the first: {failed[0]['error']})")


def _print_table(rows: list[dict], root: Path) -> None:
    out = console()
    table = new_table(title=f"datasets (data root: {root})")
    for column in ("name", "licence", "on disk", "rows", "GPUs", "dtypes", "families", "timing", "dropped"):
        table.add_column(column, justify="right" if column in ("rows", "dropped") else "left")
    for row in rows:
        on_disk = row["state"] if row["state"] != "partial" else f"partial ({row['files_present']}/{row['files']})"
        rows_text = "-" if row["rows"] is None else f"{row['rows']:,}"
        dropped = sum(row["dropped"].values())
        table.add_row(row["name"], row["licence"], on_disk, rows_text, str(len(row["gpus"])) if row["gpus"] else "-",
                      ", ".join(row["dtypes"]) or "-", ", ".join(row["families"]) or "-", ", ".join(row["timing"]) or "-",
                      f"{dropped:,}" if dropped else "-")
    out.print(table)
    out.print(HELD_BACK_NOTE, highlight=False)
    for row in rows:
        if row.get("error"):  # the error names its source already
            named = row["error"].startswith(f"{row['name']}:")
            out.print(row["error"] if named else f"{row['name']}: {row['error']}", highlight=False)
        for reason, count in sorted(row["dropped"].items(), key=lambda item: -item[1]):
            out.print(f"{row['name']}: {count:,} rows left out: {reason}", highlight=False)


#: What `data list` says of the held-back GPUs: a listing showed their sources' GPU counts and no word of them.
HELD_BACK_NOTE = ("held back: rows measured on H100 (every variant) and L4 GPUs, in every source, are kept out of the "
                  "kernel table for independent evaluation; a curated mirror has them removed already, a fetched copy's "
                  "are left out when the table is built (counted in 'dropped')")


def _listing(dataset: Dataset, root: Path) -> dict:
    """One dataset's line of `lilou data list`: the DESIGN.md fields first, then the file status."""
    from lilou.data.kernel_table import SOURCES

    status = _status(dataset, root)
    entry = {"name": dataset.name, "licence": dataset.licence, "gpus": [], "dtypes": [], "families": [], "rows": None,
             "timing": [], "present": status["present"] != "absent", "kind": "kernels" if dataset.name in SOURCES else
             "other", "dropped": {}}
    if dataset.name in SOURCES and entry["present"]:
        _add_summary(entry, dataset.name, root)
    entry.update({"state" if key == "present" else key: value for key, value in status.items()
                  if key not in ("name", "licence")})
    return entry


def _add_summary(entry: dict, name: str, root: Path) -> None:
    """What a kernel source holds (its rows, GPUs, dtypes ...) into ``entry``, or the one-line error reading it."""
    from lilou.data.kernel_table import CacheNotWritableError, build_source, summarise
    from lilou.errors import LilouInputError

    try:
        with warnings.catch_warnings():  # a partial mirror is its own column of the listing
            warnings.filterwarnings("ignore", message=r".* data files missing in ")
            summary = summarise(build_source(name, root))
    except CacheNotWritableError:
        raise  # no source can be listed: the command's error, not this source's
    except LilouInputError as exc:
        entry["error"] = str(exc)
    else:
        entry.update(gpus=summary.gpus, dtypes=summary.dtypes, families=summary.families, rows=summary.rows,
                     timing=summary.timing, dropped=summary.dropped)


def _local_listings(root: Path) -> list[dict]:
    """Lines of `lilou data list` for the sources measured here (`lilou data add`), where the data root has any."""
    from lilou.data.kernel_table import LOCAL_SOURCES, check_sources
    from lilou.data.profiles import ROWS_FILE

    entries = []
    for name in (n for n in check_sources(None, root) if n in LOCAL_SOURCES):
        profiles = len(list((root / name).glob(f"*/{ROWS_FILE}")))
        entry = {"name": name, "licence": "measured here (provenance.json per profile)", "gpus": [], "dtypes": [],
                 "families": [], "rows": None, "timing": [], "present": True, "kind": "kernels", "dropped": {},
                 "state": "complete", "description": "GPU profiles of `lilou profile ops`, added by `lilou data add`",
                 "repository": None, "commit": None, "files": profiles, "files_present": profiles, "local_only": 0,
                 "root": str(root)}
        _add_summary(entry, name, root)
        entries.append(entry)
    return entries


def run_fetch(args: argparse.Namespace) -> int:
    from lilou.data.fetch import fetch

    dataset = get_dataset(args.name)
    report = fetch(dataset.name, data_dir=args.data_dir, files=args.files, progress=not args.quiet,
                   mirror=args.mirror)
    out = console()
    out.print(f"{dataset.name}: {len(report.downloaded)} downloaded ({_human_bytes(report.bytes)}), "
              f"{len(report.present)} already present, {len(report.not_downloadable)} not downloadable "
              f"(derived tables and mirror notes) -> {report.root / dataset.name}", highlight=False)
    if report.unrestored:
        raise LilouInputError(f"{len(report.unrestored)} derived tables of {dataset.name} differ from the manifest and "
                              f"cannot be downloaded (first: {report.unrestored[0]}): copy them again from the curated "
                              "mirror they came from (e.g. ../shared/datasets)")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    from lilou.data.fetch import VerifyError, verify

    report = verify(args.name, data_dir=args.data_dir, files=args.files)
    out = console()
    for path in report.missing:
        out.print(f"missing     {path}", highlight=False)
    for path, why in report.mismatched.items():
        out.print(f"mismatch    {path}: {why}", highlight=False)
    for path in report.unexpected:
        out.print(f"unexpected  {path}: not in the manifest, but a reader of {report.dataset} would load it", highlight=False)
    for path in report.held_back:
        out.print(f"held back   {path}: differs from upstream as expected (rows held back in this mirror)",
                  highlight=False)
    out.print(f"{report.dataset}: {len(report.ok)} match the manifest, {len(report.held_back)} held back, "
              f"{len(report.missing)} missing, {len(report.mismatched)} differ, {len(report.unexpected)} unexpected, "
              f"{len(report.unchecked)} "
              f"not checked (notes, derived tables not on disk) in {report.folder}", highlight=False)
    if report.unexpected and not (report.missing or report.mismatched):
        raise VerifyError(f"{len(report.unexpected)} files in {report.folder} are not in the manifest of "
                          f"{report.dataset} but would be read as its measurements (first: {report.unexpected[0]}): "
                          "remove them or move them out of the data root")
    if report.problems:
        first = report.missing[0] if report.missing else next(iter(report.mismatched))
        raise VerifyError(f"{report.problems} files of {report.dataset} are missing or differ from the manifest "
                          f"(first: {first}): {_remedy(report)}")
    return 0


def _remedy(report) -> str:
    """What restores the files `lilou data verify` found missing or different (a fetch where it can)."""
    from lilou.data.fetch import CURATED_NOTES

    downloadable = {entry.path for entry in get_dataset(report.dataset).files if entry.downloadable}
    bad = [*report.missing, *report.mismatched]
    derived = [path for path in bad if path not in downloadable]
    parts = []
    if derived:
        parts.append(f"{derived[0]} is derived and cannot be downloaded: copy it again from the curated mirror it "
                     "came from (e.g. ../shared/datasets)")
    if len(derived) < len(bad):
        if any((report.folder / note).is_file() for note in CURATED_NOTES):
            parts.append(f"{report.folder} is a curated mirror, which fetch never rewrites: restore it from the "
                         f"mirror it was copied from, or `lilou data fetch {report.dataset} --data-dir OTHER`")
        else:
            parts.append(f"run `lilou data fetch {report.dataset} --data-dir {report.folder.parent}` to download "
                         "them again")
    return "; ".join(parts)


def _human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"
