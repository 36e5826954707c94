"""Manifests of aiconfigurator, vidur, deepbench, liger_kernel against the mirror; pooch-based fetch and verify."""
from __future__ import annotations

import functools
import hashlib
import http.server
import importlib.util
import os
import shutil
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from lilou.cli import main as cli_main
from lilou.data import get_dataset
from lilou.data.fetch import ChecksumError, FetchError, fetch, make_pooch, verify
from lilou.errors import LilouInputError

REPO = Path(__file__).resolve().parents[1]
NEW = ("aiconfigurator", "vidur", "deepbench", "liger_kernel")
PREFIX = {"aiconfigurator": "aic-core/src/aiconfigurator_core/systems/", "vidur": "data/profiling/",
          "deepbench": "", "liger_kernel": "benchmark/data/"}
PINS = {  # repo, commit, licence as each SOURCE states them
    "aiconfigurator": ("ai-dynamo/aiconfigurator", "095f58a51c4ca8e61b66ec108d86f223f8d559ce", "Apache-2.0"),
    "vidur": ("microsoft/vidur", "7d47513363ec447a741ac5e47241580b47724fbf", "MIT"),
    "deepbench": ("baidu-research/DeepBench", "da81ba7820739e2e506dc27f382d15be5479f98f", "Apache-2.0"),
    "liger_kernel": ("linkedin/Liger-Kernel", "ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c", "BSD-2-Clause"),
}
# (files, downloadable, derived, held-back) of each manifest
COUNTS = {"aiconfigurator": (200, 197, 0, 0), "vidur": (18, 15, 0, 0), "deepbench": (19, 13, 3, 0),
          "liger_kernel": (7, 4, 0, 1)}
SAMPLES = {  # a couple of files of each dataset to fetch from a file:// mirror
    "aiconfigurator": ["b200_sxm.yaml", "data/a100_sxm/gemm/vllm/0.14.0/*"],
    "vidur": ["LICENSE", "compute/a40/microsoft/phi-2/mlp.csv"],
    "deepbench": ["results/train/DeepBench_NV_T4.xlsx", "results/inference/DeepBench_NV_T4.xlsx", "gemm_tidy.csv"],
    "liger_kernel": ["all_benchmark_data_cutedsl.csv", "LICENSE"],
}
LIGER_HELD = "all_benchmark_data.csv"
AIC_GEMM = "data/a100_sxm/gemm/vllm/0.14.0/gemm_perf.parquet"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def upstream_sums(folder: Path) -> dict[str, str]:
    lines = (folder / "UPSTREAM_SHA256SUMS").read_text().splitlines()
    return {path.strip(): digest for digest, path in (line.split(None, 1) for line in lines if line.strip())}


# ------------------------------------------------------------------------ manifests


@pytest.mark.parametrize("name", NEW)
def test_registry_pins_what_source_says(datasets_dir: Path, name: str) -> None:
    dataset = get_dataset(name)
    (upstream,) = dataset.upstreams.values()
    assert (upstream.repo, upstream.commit, upstream.licence) == PINS[name] and dataset.licence == PINS[name][2]
    source = (datasets_dir / name / "SOURCE").read_text()
    assert upstream.repo in source and upstream.commit in source and upstream.licence in source


@pytest.mark.parametrize("name", NEW)
def test_manifest_covers_the_mirror_and_verbatim_hashes_match(datasets_dir: Path, name: str) -> None:
    folder = datasets_dir / name
    files = {f.path: f for f in get_dataset(name).files}
    assert set(files) == {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    sums = upstream_sums(folder)
    assert {f.upstream_path for f in files.values() if f.downloadable} == set(sums)  # every upstream file, once
    for entry in files.values():
        if entry.downloadable:
            assert entry.sha256 == sums[entry.upstream_path]
            expected_local = entry.upstream_path.removeprefix(PREFIX[name])
            assert entry.path == expected_local, entry.upstream_path
        if entry.origin == "verbatim":
            assert sha256(folder / entry.path) == entry.sha256, entry.path
            assert (folder / entry.path).stat().st_size == entry.size
    origins = Counter(f.origin for f in files.values())
    counts = (len(files), sum(f.downloadable for f in files.values()), origins["derived"], origins["held-back"])
    assert counts == COUNTS[name]


def test_derived_and_held_back_entries(datasets_dir: Path) -> None:
    deepbench = {f.path: f for f in get_dataset("deepbench").files}
    for table in ("gemm_tidy.csv", "conv_tidy.csv", "rnn_tidy.csv"):
        entry = deepbench[table]
        assert entry.origin == "derived" and not entry.downloadable
        assert entry.sha256 == sha256(datasets_dir / "deepbench" / table)
    liger = get_dataset("liger_kernel")
    held = next(f for f in liger.files if f.path == LIGER_HELD)
    assert (held.origin, held.size, held.upstream_path) == ("held-back", None, "benchmark/data/all_benchmark_data.csv")
    assert held.sha256 == upstream_sums(datasets_dir / "liger_kernel")[held.upstream_path]
    assert held.sha256 != sha256(datasets_dir / "liger_kernel" / LIGER_HELD)  # H100 rows removed locally
    assert liger.url(held) == ("https://raw.githubusercontent.com/linkedin/Liger-Kernel/"
                               "ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c/benchmark/data/all_benchmark_data.csv")


def test_shipped_manifests_are_up_to_date(datasets_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("make_data_manifest", REPO / "scripts" / "make_data_manifest.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look themselves up there
    monkeypatch.setattr(sys, "path", list(sys.path))       # it prepends the repository
    spec.loader.exec_module(module)
    assert module.main(["--check", "--mirror", str(datasets_dir)]) == 0


def test_pooch_registry_is_the_manifest() -> None:
    dataset = get_dataset("aiconfigurator")
    entries = dataset.files
    pup = make_pooch(dataset, Path("/nonexistent"), entries)
    downloadable = [e for e in entries if e.downloadable]
    assert pup.base_url == ("https://raw.githubusercontent.com/ai-dynamo/aiconfigurator/"
                            "095f58a51c4ca8e61b66ec108d86f223f8d559ce/")
    assert pup.registry == {e.path: f"sha256:{e.sha256}" for e in downloadable}
    entry = next(e for e in downloadable if e.path == AIC_GEMM)
    assert pup.get_url(AIC_GEMM) == dataset.url(entry) == pup.base_url + entry.upstream_path


# ---------------------------------------------------------------------------- fetch


@pytest.mark.parametrize("name", NEW)
def test_fetch_from_a_file_mirror_reproduces_files(datasets_dir: Path, tmp_path: Path, name: str) -> None:
    report = fetch(name, data_dir=tmp_path, files=SAMPLES[name], progress=False, mirror=datasets_dir.resolve().as_uri())
    assert report.downloaded and not report.present
    umask = os.umask(0o022)
    os.umask(umask)
    for path in report.downloaded:
        got = tmp_path / name / path
        assert got.read_bytes() == (datasets_dir / name / path).read_bytes()
        assert got.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would make it, not pooch's 0600
    assert report.bytes == sum((tmp_path / name / p).stat().st_size for p in report.downloaded)
    if name == "deepbench":
        assert report.not_downloadable == ["gemm_tidy.csv"]
    assert sorted(p.name for p in (tmp_path / name).rglob("tmp*")) == []  # no temporary file left
    again = fetch(name, data_dir=tmp_path, files=SAMPLES[name], progress=False, mirror=datasets_dir.resolve().as_uri())
    assert again.downloaded == [] and sorted(again.present) == sorted(report.downloaded)


def test_a_truncated_mirror_file_is_rejected_and_leaves_nothing(datasets_dir: Path, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror" / "aiconfigurator"
    for rel in (AIC_GEMM, "b200_sxm.yaml"):
        (mirror / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(datasets_dir / "aiconfigurator" / rel, mirror / rel)
    raw = (mirror / AIC_GEMM).read_bytes()
    (mirror / AIC_GEMM).write_bytes(raw[: len(raw) // 2])
    target = tmp_path / "data"
    with pytest.raises(ChecksumError) as info:
        fetch("aiconfigurator", data_dir=target, files=[AIC_GEMM, "b200_sxm.yaml"], progress=False,
              mirror=(tmp_path / "mirror").as_uri())
    message = str(info.value)
    assert "\n" not in message and f"aiconfigurator/{AIC_GEMM}" in message and "nothing was written" in message
    folder = target / "aiconfigurator" / Path(AIC_GEMM).parent
    assert list(folder.iterdir()) == []  # neither the file nor a temporary file
    # The good file of the same fetch still arrived.
    assert info.value.report.downloaded == ["b200_sxm.yaml"]
    assert sha256(target / "aiconfigurator" / "b200_sxm.yaml") == sha256(datasets_dir / "aiconfigurator" / "b200_sxm.yaml")


def test_the_held_back_liger_file_fails_the_upstream_hash_from_the_mirror(datasets_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ChecksumError, match="held back in curated mirrors") as info:
        fetch("liger_kernel", data_dir=tmp_path, progress=False, mirror=datasets_dir.resolve().as_uri())
    assert f"liger_kernel/{LIGER_HELD}" in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "liger_kernel" / LIGER_HELD).exists()
    assert sorted(p.name for p in (tmp_path / "liger_kernel").iterdir()) == [
        "LICENSE", "all_benchmark_data_cutedsl.csv", "all_benchmark_data_cutile.csv"]


def test_a_wrong_local_copy_is_replaced(datasets_dir: Path, tmp_path: Path) -> None:
    rel = "compute/a100/microsoft/phi-2/mlp.csv"
    target = tmp_path / "vidur" / rel
    target.parent.mkdir(parents=True)
    good = (datasets_dir / "vidur" / rel).read_bytes()
    target.write_bytes(good[:100])  # truncated by an interrupted copy
    report = fetch("vidur", data_dir=tmp_path, files=[rel], progress=False, mirror=datasets_dir.resolve().as_uri())
    assert report.downloaded == [rel] and target.read_bytes() == good


def test_a_curated_mirror_is_never_written(datasets_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "liger_kernel"
    folder.mkdir()
    shutil.copy(datasets_dir / "liger_kernel" / "UPSTREAM_SHA256SUMS", folder)
    shutil.copy(datasets_dir / "liger_kernel" / LIGER_HELD, folder)
    before = sha256(folder / LIGER_HELD)
    with pytest.raises(LilouInputError, match="curated mirror"):
        fetch("liger_kernel", data_dir=tmp_path, progress=False, mirror=datasets_dir.resolve().as_uri())
    assert sha256(folder / LIGER_HELD) == before and sorted(p.name for p in folder.iterdir()) == [
        "UPSTREAM_SHA256SUMS", LIGER_HELD]


@pytest.fixture
def http_mirror(datasets_dir: Path) -> Iterator[str]:
    """The mirror served over HTTP on localhost: exercises pooch's HTTPDownloader without the network."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(datasets_dir)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_over_http_with_a_progress_bar(datasets_dir: Path, tmp_path: Path, http_mirror: str) -> None:
    files = ["compute/a40/*/*/mlp.csv"]
    report = fetch("vidur", data_dir=tmp_path, files=files, progress=True, mirror=http_mirror, retries=0)
    assert len(report.downloaded) == 6
    for path in report.downloaded:
        assert sha256(tmp_path / "vidur" / path) == sha256(datasets_dir / "vidur" / path)
    with pytest.raises(FetchError, match="HTTP 404") as info:  # not on the server: one line, not retried
        fetch("vidur", data_dir=tmp_path, files=["LICENSE"], progress=False, mirror=http_mirror + "/nowhere")
    assert "vidur/LICENSE" in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "vidur" / "LICENSE").exists()


def test_unreachable_host_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="check the network") as info:
        fetch("deepbench", data_dir=tmp_path, files=["LICENSE"], progress=False, mirror="http://127.0.0.1:9",
              retries=0, timeout=2)
    assert "deepbench/LICENSE" in str(info.value) and "\n" not in str(info.value)


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(LilouInputError, match="unknown dataset 'h100'"):
        fetch("h100", data_dir=tmp_path)
    with pytest.raises(LilouInputError, match="no file of vidur matches"):
        fetch("vidur", data_dir=tmp_path, files=["compute/h100/*"], progress=False)
    with pytest.raises(FetchError, match="unsupported URL scheme"):
        fetch("vidur", data_dir=tmp_path, files=["LICENSE"], progress=False, mirror="ftp://example.org")


# --------------------------------------------------------------------------- verify


def test_verify_the_mirror_expects_held_back_files(datasets_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = verify("liger_kernel", datasets_dir)
    assert report.held_back == [LIGER_HELD] and report.problems == 0 and len(report.ok) == 3
    assert cli_main(["data", "verify", "deepbench", "--data-dir", str(datasets_dir)]) == 0
    assert cli_main(["data", "verify", "liger_kernel", "--data-dir", str(datasets_dir)]) == 0
    assert "differs from upstream as expected" in capsys.readouterr().out


def test_verify_catches_a_changed_held_back_file_of_the_curated_mirror(datasets_dir: Path, tmp_path: Path) -> None:
    """A held-back file of the curated mirror differs from upstream on purpose; any other change to it was reported
    as "held back as expected" (a 0.53 -> 9.53 ms edit passed). The manifest holds the curated copy's hash too."""
    copy = tmp_path / "liger_kernel"
    shutil.copytree(datasets_dir / "liger_kernel", copy)
    held = copy / LIGER_HELD
    held.chmod(0o644)
    assert verify("liger_kernel", tmp_path).held_back == [LIGER_HELD]  # the curated copy, unchanged
    held.write_text(held.read_text().replace("0.5324159860610962", "9.5324159860610962", 1))
    report = verify("liger_kernel", tmp_path)
    assert report.mismatched == {LIGER_HELD: "sha256 differs from the upstream file and from the curated mirror's copy"}


def test_verify_reports_missing_and_truncated_files(datasets_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    fetch("vidur", data_dir=tmp_path, files=["compute/a40/*"], progress=False, mirror=datasets_dir.resolve().as_uri())
    rel = "compute/a40/microsoft/phi-2/mlp.csv"
    raw = (tmp_path / "vidur" / rel).read_bytes()
    (tmp_path / "vidur" / rel).write_bytes(raw[:-10])
    report = verify("vidur", tmp_path)
    assert report.mismatched == {rel: f"truncated ({len(raw) - 10} of {len(raw)} B)"}
    assert sorted(report.missing) == sorted(f.path for f in get_dataset("vidur").files
                                            if f.downloadable and not f.path.startswith("compute/a40/"))
    capsys.readouterr()
    assert cli_main(["data", "verify", "vidur", "--data-dir", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert f"mismatch    {rel}: truncated" in captured.out
    error = captured.err.strip()
    assert "\n" not in error and "lilou data fetch vidur" in error and "Traceback" not in error
    # A held-back file in a fetched (not curated) folder must be the upstream one.
    (tmp_path / "liger_kernel").mkdir()
    shutil.copy(datasets_dir / "liger_kernel" / LIGER_HELD, tmp_path / "liger_kernel")
    assert LIGER_HELD in verify("liger_kernel", tmp_path).mismatched


def test_cli_errors_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["data", "fetch", "h100", "--data-dir", str(tmp_path)]) == 2
    assert cli_main(["data", "verify", "vidur", "--data-dir", str(tmp_path)]) == 2  # nothing there
    assert cli_main(["data", "fetch", "liger_kernel", "--data-dir", str(tmp_path), "--quiet",
                     "--mirror", (tmp_path / "empty").as_uri()]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("lilou: error: ") for line in err)
    assert "invalid choice: 'h100'" in err[0] and "lilou data fetch vidur" in err[1] and "not on the mirror" in err[2]


def test_verify_reports_files_a_reader_would_load_that_the_manifest_lacks(datasets_dir: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """An extra ``all_benchmark_data_extra.csv`` was read as Liger-Kernel rows (1,594 -> 2,456) while verify said
    "0 missing, 0 differ" and exited 0."""
    copy = tmp_path / "liger_kernel"
    shutil.copytree(datasets_dir / "liger_kernel", copy)
    shutil.copyfile(copy / LIGER_HELD, copy / "all_benchmark_data_extra.csv")
    (copy / "notes.txt").write_text("not read by any reader\n")
    report = verify("liger_kernel", tmp_path)
    assert report.unexpected == ["all_benchmark_data_extra.csv"] and report.problems == 1
    assert verify("liger_kernel", tmp_path, files=["LICENSE"]).unexpected == []
    capsys.readouterr()
    assert cli_main(["data", "verify", "liger_kernel", "--data-dir", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert ("unexpected  all_benchmark_data_extra.csv: not in the manifest, but a reader of liger_kernel would load it"
            in captured.out)
    assert captured.err == (f"lilou: error: 1 files in {copy} are not in the manifest of liger_kernel but would be "
                            "read as its measurements (first: all_benchmark_data_extra.csv): remove them or move them "
                            "out of the data root\n")


def test_a_changed_derived_table_names_the_real_fix_and_fetch_does_not_pass(datasets_dir: Path, tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """verify told to fetch a changed gemm_tidy.csv again; that fetch exited 0 and the file stayed changed."""
    (tmp_path / "deepbench").mkdir()
    tidy = tmp_path / "deepbench" / "gemm_tidy.csv"
    tidy.write_bytes((datasets_dir / "deepbench" / "gemm_tidy.csv").read_bytes() + b"\n")
    assert cli_main(["data", "verify", "deepbench", "--data-dir", str(tmp_path), "--files", "gemm_tidy.csv"]) == 2
    assert capsys.readouterr().err == (
        "lilou: error: 1 files of deepbench are missing or differ from the manifest (first: gemm_tidy.csv): "
        "gemm_tidy.csv is derived and cannot be downloaded: copy it again from the curated mirror it came from "
        "(e.g. ../shared/datasets)\n")
    assert cli_main(["data", "fetch", "deepbench", "--data-dir", str(tmp_path), "--files", "gemm_tidy.csv",
                     "--quiet"]) == 2
    assert capsys.readouterr().err == (
        "lilou: error: 1 derived tables of deepbench differ from the manifest and cannot be downloaded (first: "
        "gemm_tidy.csv): copy them again from the curated mirror they came from (e.g. ../shared/datasets)\n")
    # a changed verbatim file of a curated copy: fetch refuses to rewrite it, so the hint is another root
    copy = tmp_path / "curated" / "vidur"
    shutil.copytree(datasets_dir / "vidur", copy)
    rel = "compute/a40/microsoft/phi-2/mlp.csv"
    (copy / rel).chmod(0o644)
    (copy / rel).write_bytes((copy / rel).read_bytes() + b"\n")
    assert cli_main(["data", "verify", "vidur", "--data-dir", str(copy.parent)]) == 2
    assert capsys.readouterr().err.endswith(
        f"{copy} is a curated mirror, which fetch never rewrites: restore it from the mirror it was copied from, or "
        "`lilou data fetch vidur --data-dir OTHER`\n")
