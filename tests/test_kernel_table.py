"""The kernel-measurement table on the real mirror: rows of every source, mapped to the schema exactly."""
from __future__ import annotations

import ast
import csv
import json
import shutil
from pathlib import Path

import pytest

from lilou.data.kernel_schema import COLUMN_NAMES, DTYPES, FAMILIES, FAMILY_SHAPES, SHAPE_FIELDS, TIMING_METHODS
from lilou.data.kernel_table import SOURCES, build_source, kernel_table, load_rows, summarise
from lilou.errors import LilouInputError, MissingDataError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def table(datasets_dir: Path):
    return kernel_table(data_dir=datasets_dir)


def one(table, where: str) -> dict:
    rows = table.filter(where).fetchall()
    assert len(rows) == 1, (where, len(rows))
    return dict(zip(table.columns, rows[0]))


def test_schema_is_consistent() -> None:
    assert set(SHAPE_FIELDS) <= set(COLUMN_NAMES)
    for family, fields in FAMILY_SHAPES.items():
        assert set(fields) <= set(SHAPE_FIELDS), family
    assert {"fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4"} <= set(DTYPES)


def test_every_value_is_in_the_schema(table) -> None:
    for column, allowed in (("dtype", DTYPES), ("family", FAMILIES), ("timing", TIMING_METHODS)):
        values = {v for (v,) in table.aggregate(f'"{column}"').fetchall()}
        assert values <= set(allowed), column
    assert table.filter("latency_ms IS NULL OR latency_ms <= 0 OR gpu IS NULL").count("*").fetchall()[0][0] == 0
    held_back = table.filter("starts_with(gpu, 'h100') OR gpu = 'l4'").count("*").fetchall()[0][0]
    assert held_back == 0


def test_neusight_linear_row(table) -> None:
    row = one(table, "source = 'neusight' AND subset = 'train' AND gpu = 't4' AND op = 'linear' "
                     "AND m = 58 AND n = 141 AND k = 13")
    assert row["latency_ms"] == 0.052213333547115326 and row["device"] == "Tesla T4"
    assert (row["family"], row["dtype"], row["unit"], row["batch"], row["bias"]) == ("gemm", "fp32", "fp32", 1, True)
    assert row["timing"] == "cuda-events-eager" and row["provider"] == "volta_sgemm_32x128_tn"
    assert row["framework"] == "PyTorch 2.1.0 cu121 cuDNN 8902"
    assert row["rows"] is None and row["in_c"] is None


def test_neusight_conv_and_counts(table, datasets_dir: Path) -> None:
    conv = table.filter("source = 'neusight' AND gpu = 't4' AND family = 'conv'").order("latency_ms").limit(1)
    assert conv.count("*").fetchall()[0][0] == 1
    t4_conv = datasets_dir / "neusight" / "kernels" / "train" / "conv" / "Tesla_T4.csv"
    lines = sum(1 for _ in t4_conv.open()) - 1
    assert table.filter("source = 'neusight' AND gpu = 't4' AND family = 'conv'").count("*").fetchall()[0][0] == lines
    row = table.filter("source = 'neusight' AND family = 'conv'").limit(1).fetchall()[0]
    record = dict(zip(table.columns, row))
    assert record["in_h"] == record["in_w"] and record["kernel_h"] == record["kernel_w"] and record["groups"] == 1
    # kernels/test/vec.csv repeats elem + ln + softmax: it is not read
    test_norms = table.filter("source = 'neusight' AND subset = 'test' AND family = 'norm'").count("*").fetchall()[0][0]
    assert test_norms == sum(1 for _ in (datasets_dir / "neusight/kernels/test/ln.csv").open()) - 1


def test_aiconfigurator_rows(table) -> None:
    row = one(table, "source = 'aiconfigurator' AND gpu = 'h200' AND family = 'gemm' AND dtype = 'bf16' "
                     "AND framework = 'TRTLLM 1.3.0rc20' AND m = 4353 AND n = 65536 AND k = 51200")
    assert row["latency_ms"] == pytest.approx(41.099622090657554)
    assert (row["unit"], row["timing"], row["subset"], row["device"]) == (
        "bf16_tensor", "cuda-graph-replay", "h200_sxm", "NVIDIA H200")
    fp8_block = table.filter("source = 'aiconfigurator' AND quant = 'fp8-block'").limit(1).fetchall()[0]
    fp8 = dict(zip(table.columns, fp8_block))
    assert (fp8["dtype"], fp8["unit"], fp8["includes"]) == ("fp8", "fp8_tensor", "activation quantisation")
    decode = table.filter("source = 'aiconfigurator' AND family = 'attention-decode'").limit(1).fetchall()[0]
    decode = dict(zip(table.columns, decode))
    assert decode["kv_len"] is not None and decode["seq_len"] is None and decode["m"] is None


def test_aiconfigurator_drops_are_counted(datasets_dir: Path) -> None:
    build = build_source("aiconfigurator", datasets_dir)
    assert build.dropped["not an NVIDIA GPU (Intel(R) Arc(TM) Pro B60 Graphics)"] == 66630
    assert build.dropped["superseded by a newer version of the same shape"] == 19357
    from lilou.data.readers.aiconfigurator import EAGER_FP8_BLOCK

    assert build.dropped[EAGER_FP8_BLOCK] == 214903  # every vLLM fp8_block GEMM: timed eagerly upstream
    import pyarrow.parquet as pq

    upstream = sum(pq.read_metadata(path).num_rows for path in (datasets_dir / "aiconfigurator").rglob("*.parquet"))
    assert build.rows + sum(build.dropped.values()) == upstream == 7_647_259  # every row kept or counted


def test_vidur_rows(table) -> None:
    rows = table.filter("source = 'vidur' AND gpu = 'a100-sxm4-80gb' AND op = 'attn_pre_proj' "
                        "AND subset = 'meta-llama/Llama-2-7b-hf' AND m = 4096 AND n = 12288").order("latency_ms")
    assert [r[0] for r in rows.project("latency_ms").fetchall()] == [1.8865, 1.911]  # 4096 is listed twice upstream
    record = dict(zip(table.columns, rows.limit(1).fetchall()[0]))
    assert (record["k"], record["dtype"], record["unit"], record["timing"]) == (
        4096, "fp16", "fp16_tensor", "profiler-kernel-time")
    a40_up = table.filter("source = 'vidur' AND gpu = 'a40' AND op = 'mlp_up_proj' "
                          "AND subset = 'meta-llama/Llama-2-7b-hf' AND m = 1 AND shape LIKE '%\"tp\":1}'")
    assert a40_up.project("n, k").fetchall() == [(2 * 11008, 4096)]  # gated: up and gate in one GEMM


def test_deepbench_rows(table) -> None:
    row = one(table, "source = 'deepbench' AND gpu = 't4' AND dtype = 'int8' AND family = 'gemm' "
                     "AND m = 5124 AND n = 700 AND k = 2048")
    assert (row["latency_ms"], row["unit"], row["layout"], row["timing"]) == (0.999, "int8_tensor", "NN", "host-timer-loop")
    pascal = table.filter("source = 'deepbench' AND gpu = 'gtx-1080-ti' AND dtype = 'int8'").aggregate("unit")
    assert pascal.fetchall() == [("int8",)]  # DP4A, no tensor cores
    p100 = table.filter("source = 'deepbench' AND gpu = 'p100-pcie-16gb' AND dtype = 'fp16'").aggregate("unit")
    assert p100.fetchall() == [("fp32",)]  # "pseudo FP16": FP16 storage, FP32 math
    modes = {m for (m,) in table.filter("source = 'deepbench' AND family = 'conv'").aggregate("mode").fetchall()}
    assert modes == {"forward", "backward-data", "backward-filter"}


def test_liger_rows_and_drops(table, datasets_dir: Path) -> None:
    build = build_source("liger_kernel", datasets_dir)
    assert build.dropped["memory metric, not a latency"] == 909
    assert build.dropped["dtype not recorded (the benchmark script's default applies)"] == 300
    assert build.dropped["group_norm swept over tokens: the tensor shape is not recorded"] == 36  # B200 cuTile file
    rows = table.filter("source = 'liger_kernel' AND op = 'rms_norm' AND provider = 'huggingface' "
                        "AND mode = 'forward'").order("cols").project("gpu, dtype, rows, cols, timing")
    assert rows.fetchall()[0] == ("a100-sxm4-80gb", "bf16", 2048, 1024, "triton-do-bench")


def test_summary_and_filters(datasets_dir: Path) -> None:
    summary = summarise(build_source("deepbench", datasets_dir))
    assert summary.dtypes == ["fp16", "fp32", "int8"] and summary.families == ["conv", "gemm", "rnn"]
    assert len(summary.gpus) == 8 and summary.timing == ["host-timer-loop"]
    bf16 = load_rows("family = 'gemm' AND dtype = 'bf16' AND gpu = 'l40s'", columns=["m", "n", "k", "latency_ms"],
                     sources=["aiconfigurator"], data_dir=datasets_dir)
    assert bf16.column_names == ["m", "n", "k", "latency_ms"] and bf16.num_rows > 50_000
    with pytest.raises(LilouInputError, match="not columns"):
        load_rows(columns=["latency"], sources=["deepbench"], data_dir=datasets_dir)
    with pytest.raises(LilouInputError, match="unknown kernel source"):
        kernel_table(["deepbenchx"], data_dir=datasets_dir)


def test_one_source_or_column_given_as_a_string_is_that_name_not_its_letters(datasets_dir: Path) -> None:
    # kernel_table("vidur") said "unknown kernel source v, i, d, u, r"; columns="gpu": "not columns: g, p, u"
    whole = load_rows(columns=["gpu"], sources=["deepbench"], data_dir=datasets_dir)
    named = load_rows(columns="gpu", sources="deepbench", data_dir=datasets_dir)
    assert named.column_names == ["gpu"] and named.num_rows == whole.num_rows > 0
    assert kernel_table("deepbench", data_dir=datasets_dir).shape == kernel_table(["deepbench"], datasets_dir).shape
    with pytest.raises(LilouInputError, match="^unknown kernel source deepbenchx; known: neusight, "):
        kernel_table("deepbenchx", data_dir=datasets_dir)


@pytest.mark.parametrize("per_group", [0, -1, 2.5, None, "3", True])
def test_a_sample_needs_a_positive_whole_number_per_group(datasets_dir: Path, per_group) -> None:
    # 0 and -1 sampled no row (the folds then scored an empty table, exit 0), 2.5 took 2, None was an SQL error
    from lilou.latency.kernel_model.table_sample import sample_table

    with pytest.raises(LilouInputError, match=rf"^per_group={per_group}: give a positive whole number of rows per "):
        sample_table(kernel_table(["deepbench"], datasets_dir), per_group=per_group)


def test_a_sample_of_one_per_group_has_one_row_per_group(datasets_dir: Path) -> None:
    from lilou.latency.kernel_model.table_sample import sample_table

    relation = kernel_table(["deepbench"], datasets_dir)
    groups = relation.filter("mode = 'forward'").aggregate("count(DISTINCT (source, gpu, dtype, family))").fetchall()[0][0]
    sample = sample_table(relation, per_group=1)
    keys = list(zip(sample["source"], sample["gpu"], sample["dtype"], sample["family"]))
    assert len(keys) == len(set(keys)) == groups > 0


def test_data_list_json_reports_every_source(datasets_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lilou.cli import main

    assert main(["data", "list", "--format", "json", "--data-dir", str(datasets_dir)]) == 0
    entries = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    kernels = [e for e in entries.values() if e["kind"] == "kernels" and e["present"]]
    assert {e["name"] for e in kernels} == set(SOURCES)
    for entry in kernels:
        assert set(entry) >= {"name", "licence", "gpus", "dtypes", "families", "rows", "timing", "present"}
        assert entry["rows"] > 0 and entry["gpus"]
    gpus = {g for e in kernels for g in e["gpus"]}
    dtypes = {d for e in kernels for d in e["dtypes"]}
    assert len(gpus) >= 20 and len(dtypes) >= 4
    assert entries["aiconfigurator"]["timing"] == ["cuda-graph-replay"]
    assert any("Intel" in reason for reason in entries["aiconfigurator"]["dropped"])


def test_missing_and_unreadable_sources_give_one_line(datasets_dir: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(MissingDataError, match="vidur"):
        build_source("vidur", tmp_path)
    broken = tmp_path / "liger_kernel"
    broken.mkdir()
    (broken / "all_benchmark_data.csv").write_bytes(b"\x00\xff\x00garbage")
    with pytest.raises(LilouInputError, match="liger_kernel"):
        build_source("liger_kernel", tmp_path)
    parquet = tmp_path / "aiconfigurator" / "data" / "h200_sxm" / "gemm" / "trtllm" / "1.0"
    parquet.mkdir(parents=True)
    source = next((datasets_dir / "aiconfigurator" / "data" / "h200_sxm").glob("gemm/*/*/gemm_perf.parquet"))
    (parquet / "gemm_perf.parquet").write_bytes(source.read_bytes()[:1000])  # truncated
    with pytest.raises(LilouInputError, match="aiconfigurator: cannot read") as error:
        build_source("aiconfigurator", tmp_path)
    assert "\n" not in str(error.value) and "lilou data fetch aiconfigurator" in str(error.value)
    shutil.rmtree(tmp_path / "aiconfigurator")


def test_data_and_hardware_are_leaves() -> None:
    """lilou/data and lilou/hardware import no pipeline stage (DESIGN.md: data and hardware are leaves)."""
    allowed = ("lilou.data", "lilou.hardware", "lilou.errors")
    offenders = []
    for folder in ("data", "hardware"):
        for path in (REPO / "lilou" / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [node.module] if isinstance(node, ast.ImportFrom) else (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                offenders += [(path.name, n) for n in names if n and n.startswith("lilou") and not n.startswith(allowed)]
    assert offenders == []


def test_deepbench_reads_the_workbooks_without_the_tidy_csvs(datasets_dir: Path, tmp_path: Path) -> None:
    """A fetched DeepBench copy has only the upstream xlsx workbooks: the same rows come out of them."""
    copy = tmp_path / "deepbench"
    shutil.copytree(datasets_dir / "deepbench" / "results", copy / "results")
    from_workbooks = build_source("deepbench", tmp_path)
    from_tidy = build_source("deepbench", datasets_dir)
    assert from_workbooks.rows == from_tidy.rows == 6958
    assert from_workbooks.dropped == from_tidy.dropped
    columns = ", ".join(f'"{c}"' for c in COLUMN_NAMES if c != "latency_ms")
    query = "SELECT {c}, round(latency_ms, 6) FROM read_parquet('{p}') ORDER BY ALL"
    from lilou.data.kernel_table import connect

    con = connect()
    a = con.execute(query.format(c=columns, p=from_workbooks.parquet)).fetchall()
    b = con.execute(query.format(c=columns, p=from_tidy.parquet)).fetchall()
    assert a == b


def test_a_partial_mirror_is_said_not_silently_smaller(datasets_dir: Path, tmp_path: Path) -> None:
    """A copy missing one of DeepBench's 12 workbooks built a smaller table without a word (a training run on it
    learns from fewer GPUs): it warns with the count and the first file missing; a complete copy does not."""
    import warnings

    copy = tmp_path / "deepbench"
    shutil.copytree(datasets_dir / "deepbench" / "results", copy / "results")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert build_source("deepbench", tmp_path).rows == 6958
    (copy / "results" / "inference" / "server" / "DeepBench_NV_1080Ti.xlsx").unlink()
    with pytest.warns(UserWarning, match=r"deepbench: 1 of 12 data files missing in .* \(first results/inference/server/"
                                         r"DeepBench_NV_1080Ti.xlsx\).*`lilou data fetch deepbench`"):
        assert build_source("deepbench", tmp_path).rows == 6711


def test_two_processes_build_one_part_together(datasets_dir: Path, tmp_path: Path) -> None:
    """Two benchmarks started together build the same cached part at once: each writes its own partial
    file and both end with the part (one shared partial file made the slower one fail)."""
    import os
    import subprocess
    import sys

    script = ("import sys; from lilou.data.kernel_table import build_source; "
              "b = build_source('liger_kernel', sys.argv[1]); print(b.rows, b.parquet.name)")
    env = {**os.environ, "LILOU_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.Popen([sys.executable, "-c", script, str(datasets_dir)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=120) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err for _, err in outputs]
    assert outputs[0][0] == outputs[1][0]
    left = sorted(p.name for p in (tmp_path / "kernel_table").iterdir())
    assert not [name for name in left if name.endswith(".partial")]
    assert len(left) == 2  # one parquet part and its summary


def test_a_rebuild_prunes_older_parts(datasets_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every new key (a mirror copied afresh, a new reader or GPU database) left a 40 MB part behind: a build
    keeps the two newest older parts of its source, deletes the rest and dead builds' partial files, and
    touches no other source's files."""
    import os
    import time

    monkeypatch.setenv("LILOU_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "kernel_table"
    folder.mkdir()
    now = time.time()
    older = [f"liger_kernel-{i:016x}" for i in range(4)]  # oldest first
    for age, stem in zip((40, 30, 20, 10), older):
        for suffix in (".parquet", ".json"):
            (folder / f"{stem}{suffix}").write_text("old")
            os.utime(folder / f"{stem}{suffix}", (now - age * 3600, now - age * 3600))
    dead = folder / f"liger_kernel-{0:016x}.parquet.123.partial"
    running = folder / f"liger_kernel-{1:016x}.parquet.456.partial"
    other = folder / f"neusight-{0:016x}.parquet"
    for path in (dead, running, other):
        path.write_text("x")
    os.utime(dead, (now - 7 * 3600, now - 7 * 3600))
    os.utime(other, (now - 50 * 3600, now - 50 * 3600))

    built = build_source("liger_kernel", datasets_dir)

    left = sorted(p.name for p in folder.iterdir())
    assert built.parquet.name in left and built.parquet.with_suffix(".json").name in left
    assert [s for s in older if f"{s}.parquet" in left] == older[2:]  # the two newest older parts
    assert [s for s in older if f"{s}.json" in left] == older[2:]
    assert dead.name not in left and running.name in left and other.name in left
    assert len(left) == 2 + 4 + 2  # the new part and summary, two older parts with theirs, running, neusight


def test_an_infinite_latency_is_dropped_as_no_positive_latency(datasets_dir: Path, tmp_path: Path) -> None:
    """``inf`` passed the filter (it checked NaN and <= 0): a liger row timed as infinite reached the table."""
    copy = tmp_path / "liger_kernel"
    shutil.copytree(datasets_dir / "liger_kernel", copy)
    for path in copy.iterdir():
        path.chmod(0o644)
    y50 = "y_value_50"
    for name in ("all_benchmark_data.csv", "all_benchmark_data_cutedsl.csv", "all_benchmark_data_cutile.csv"):
        with (copy / name).open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        for row in rows:
            row[y50] = "inf"
        with (copy / name).open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    original, edited = build_source("liger_kernel", datasets_dir), build_source("liger_kernel", tmp_path)
    assert original.rows > 1000 and edited.rows == 0
    assert edited.dropped["no positive latency"] == original.dropped.get("no positive latency", 0) + original.rows


def test_a_cut_or_renamed_liger_file_says_so(datasets_dir: Path, tmp_path: Path) -> None:
    """A liger CSV cut in the middle of a line was an internal TypeError (``lilou data list`` failed for every
    source); one with ``kernel_name`` renamed made all its rows ``loss`` kernels without an op, without a word."""
    copy = tmp_path / "liger_kernel"
    shutil.copytree(datasets_dir / "liger_kernel", copy)
    main_file = copy / "all_benchmark_data.csv"
    main_file.chmod(0o644)
    text = main_file.read_text()
    main_file.write_text(text[: len(text) // 2])
    cut = build_source("liger_kernel", tmp_path)
    assert cut.dropped["incomplete line (cut off, or fewer fields than the header)"] >= 1
    assert 0 < cut.rows < build_source("liger_kernel", datasets_dir).rows
    main_file.write_text(text.replace("kernel_name,", "kernel,", 1))
    with pytest.raises(LilouInputError, match="all_benchmark_data.csv lacks the column.s. kernel_name"):
        build_source("liger_kernel", tmp_path)


class _StoppedConnection:
    """A DuckDB connection stopped as Ctrl-C stops one (DuckDB handles the signal itself and raises
    ``RuntimeError("Query interrupted")``) at the query that reads back a part just written."""

    def __init__(self, con) -> None:
        self._con = con

    def execute(self, query: str, *args):
        if "read_parquet" in query:
            raise RuntimeError("Query interrupted")
        return self._con.execute(query, *args)

    def __getattr__(self, name: str):
        return getattr(self._con, name)


def _liger_only(datasets_dir: Path, tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    (root / "liger_kernel").symlink_to(datasets_dir / "liger_kernel")
    return root


def test_an_interrupted_build_is_interrupted_and_leaves_no_partial_file(
        datasets_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C during a cold `data list` was an internal error (exit 1), and the build's partial file (26 MB for
    AIConfigurator) stayed in the cache for 6 hours."""
    from lilou.cli import main
    from lilou.data import kernel_table as module

    root = _liger_only(datasets_dir, tmp_path)
    monkeypatch.setenv("LILOU_CACHE_DIR", str(tmp_path / "cache"))
    connect = module.connect
    monkeypatch.setattr(module, "connect", lambda: _StoppedConnection(connect()))
    assert main(["data", "list", "--format", "json", "--data-dir", str(root)]) == 130
    out, err = capsys.readouterr()
    assert (out, err) == ("", "lilou: interrupted\n")
    assert list((tmp_path / "cache" / "kernel_table").iterdir()) == []


def test_any_interrupted_query_is_an_interruption(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from lilou.cli import main
    from lilou.commands import gpus

    def stopped(args):
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(gpus, "run", stopped)
    assert main(["gpus"]) == 130
    assert capsys.readouterr().err == "lilou: interrupted\n"


def test_an_unwritable_cache_is_one_line_naming_it(datasets_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A read-only cache folder was `cannot write output (Read-only file system: ...)`, exit 1 (a build's files
    are the environment's business, and stdout was fine)."""
    from lilou.cli import main

    root = _liger_only(datasets_dir, tmp_path)
    (tmp_path / "file").write_text("not a folder")  # unwritable for root too, as a read-only mount is
    monkeypatch.setenv("LILOU_CACHE_DIR", str(tmp_path / "file" / "cache"))
    assert main(["data", "list", "--format", "json", "--data-dir", str(root)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"lilou: error: cannot write the kernel table's cache in {tmp_path}/file/cache/kernel_table "
                   "(Not a directory): set LILOU_CACHE_DIR to a writable folder (default ~/.cache/lilou)\n")


def test_a_rebuild_prunes_what_duckdb_left_of_a_killed_build(datasets_dir: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A build killed outright (SIGKILL) while DuckDB wrote its part leaves DuckDB's own tmp_ file (tens of MB),
    which the stale-partial pruning did not match and kept for good."""
    import os
    import time

    monkeypatch.setenv("LILOU_CACHE_DIR", str(tmp_path))
    folder = tmp_path / "kernel_table"
    folder.mkdir()
    dead = folder / f"tmp_liger_kernel-{0:016x}.parquet.123.partial"
    running = folder / f"tmp_liger_kernel-{1:016x}.parquet.456.partial"
    other = folder / f"tmp_neusight-{0:016x}.parquet.123.partial"
    for path in (dead, running, other):
        path.write_text("x")
    seven_hours_ago = time.time() - 7 * 3600
    for path in (dead, other):
        os.utime(path, (seven_hours_ago, seven_hours_ago))

    build_source("liger_kernel", datasets_dir)

    left = {p.name for p in folder.iterdir()}
    assert dead.name not in left and {running.name, other.name} <= left


def test_pruning_skips_a_file_another_build_renames_meanwhile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build prunes while another renames its partial file into place: the partial file listed, gone by its stat,
    made the first build fail with FileNotFoundError (seen once under load in test_two_processes_build_one_part_together)."""
    from lilou.data import kernel_table

    key = "0123456789abcdef"
    current = tmp_path / f"liger_kernel-{key}.parquet"
    current.write_bytes(b"")
    vanishing = tmp_path / f"liger_kernel-{key}.parquet.4377.partial"
    vanishing.write_bytes(b"")
    real_stat = Path.stat

    def stat(self: Path, *args, **kwargs):
        if self == vanishing:
            self.unlink(missing_ok=True)  # the other build renamed it just now
            raise FileNotFoundError(2, "No such file or directory", str(self))
        return real_stat(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", stat)
    assert kernel_table.prune_stale_parts("liger_kernel", current) == []


def test_a_quote_in_the_cache_path_is_part_of_the_path(datasets_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The cache path was pasted into SQL unquoted: with HOME=/home/o'brien (or such a LILOU_CACHE_DIR) every source
    of `lilou data list` was `cannot read the files in ... (Parser Error: unterminated string literal): check them
    with lilou data verify`, and the kernel table could never be built."""
    from lilou.cli import main

    root = _liger_only(datasets_dir, tmp_path)
    monkeypatch.setenv("LILOU_CACHE_DIR", str(tmp_path / "o'brien"))
    assert main(["data", "list", "--format", "json", "--data-dir", str(root)]) == 0
    entry = next(e for e in json.loads(capsys.readouterr().out) if e["name"] == "liger_kernel")
    assert "error" not in entry and entry["rows"] > 0
    build = build_source("liger_kernel", root)
    assert build.cached and build.parquet.parent == tmp_path / "o'brien" / "kernel_table"
    assert kernel_table(["liger_kernel"], data_dir=root).count("*").fetchall()[0][0] == build.rows == entry["rows"]


@pytest.mark.parametrize("damage", ["empty summary", "cut summary", "summary of another part", "cut part",
                                    "empty part"])
def test_a_damaged_cached_part_is_rebuilt(datasets_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str], damage: str) -> None:
    """A zero-length or cut summary or part in the cache (a crash before it reached the disk, a full disk, a CI cache
    restore cut off) failed every later `lilou data list` with `internal error: JSONDecodeError` or DuckDB's
    `No magic bytes found`, exit 1, until deleted by hand: it is a cache miss, rebuilt and replaced."""
    from lilou.cli import main

    root = _liger_only(datasets_dir, tmp_path)
    monkeypatch.setenv("LILOU_CACHE_DIR", str(tmp_path / "cache"))
    good = build_source("liger_kernel", root)
    summary = good.parquet.with_suffix(".json")
    part, meta = good.parquet.read_bytes(), summary.read_text()
    if damage == "empty summary":
        summary.write_bytes(b"")
    elif damage == "cut summary":
        summary.write_text(meta[:12])
    elif damage == "summary of another part":
        summary.write_text(json.dumps({"rows": good.rows + 1, "dropped": good.dropped}))
    elif damage == "cut part":
        good.parquet.write_bytes(part[:1000])
    else:
        good.parquet.write_bytes(b"")

    assert main(["data", "list", "--format", "json", "--data-dir", str(root)]) == 0
    out, err = capsys.readouterr()
    entry = next(e for e in json.loads(out) if e["name"] == "liger_kernel")
    assert err == "" and "error" not in entry
    assert (entry["rows"], entry["dropped"]) == (good.rows, good.dropped)
    assert json.loads(summary.read_text())["rows"] == good.rows and len(good.parquet.read_bytes()) == len(part)
    again = build_source("liger_kernel", root)
    assert again.cached and (again.parquet, again.rows) == (good.parquet, good.rows)
    assert sorted(p.name for p in summary.parent.iterdir()) == sorted([good.parquet.name, summary.name])


def test_a_full_cache_disk_is_the_caches_error(datasets_dir: Path, tmp_path: Path) -> None:
    """A full disk under the cache was `<source>: cannot read the files in <data folder> (IO Error: ... No space left
    on device): check them with lilou data verify ... and re-fetch`, sending the user to download healthy data again.
    A file size limit (RLIMIT_FSIZE) refuses the write as a full disk does."""
    import os
    import resource
    import signal
    import subprocess
    import sys

    root = _liger_only(datasets_dir, tmp_path)
    cache = tmp_path / "cache"

    def small_files() -> None:  # the part is about 20 kB
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (8000, 8000))

    env = {**os.environ, "PYTHONPATH": str(REPO), "LILOU_CACHE_DIR": str(cache)}
    env.pop("LILOU_DEBUG", None)
    child = subprocess.run([sys.executable, "-m", "lilou", "data", "list", "--format", "json", "--data-dir", str(root)],
                           env=env, preexec_fn=small_files, capture_output=True, text=True, timeout=600)
    assert (child.returncode, child.stdout) == (2, "")
    assert child.stderr == (f"lilou: error: cannot write the kernel table's cache in {cache}/kernel_table (File too "
                            "large): set LILOU_CACHE_DIR to a writable folder (default ~/.cache/lilou)\n")
    assert list((cache / "kernel_table").iterdir()) == []


def test_data_list_fails_when_no_kernel_source_on_disk_reads(datasets_dir: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A data root whose only kernel source cannot be read (here Liger's CSV replaced by another file) was listed with
    exit 0: a script checking its mirror saw success. The listing is still printed, each source with its reason once
    (it read `liger_kernel: liger_kernel: ...`), then one line and exit 2; a root with no source on disk stays 0."""
    from lilou.cli import main

    root = tmp_path / "data"
    source = root / "liger_kernel"
    source.mkdir(parents=True)
    for file in (datasets_dir / "liger_kernel").iterdir():
        (source / file.name).symlink_to(file)
    (source / "all_benchmark_data.csv").unlink()
    (source / "all_benchmark_data.csv").write_text("kernel_name,x\nrope,1\n")
    monkeypatch.setenv("LILOU_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["data", "list", "--data-dir", str(root)]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"lilou: error: none of the 1 kernel source(s) on disk under {root} can be read (the first: "
                          "liger_kernel: all_benchmark_data.csv lacks the column(s) kernel_provider")
    assert err.count("\n") == 1 and "liger_kernel: liger_kernel:" not in out
    assert [line for line in out.splitlines() if line.startswith("liger_kernel: all_benchmark_data.csv lacks")]
    assert main(["data", "list", "--format", "json", "--data-dir", str(root)]) == 2
    out, err = capsys.readouterr()
    assert next(e for e in json.loads(out) if e["name"] == "liger_kernel")["error"].startswith("liger_kernel: all_")
    (tmp_path / "empty").mkdir()
    assert main(["data", "list", "--format", "json", "--data-dir", str(tmp_path / "empty")]) == 0
