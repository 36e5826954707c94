"""`lilou profile ops` and `lilou data add`: the sweep, a real CPU dry run, the profile checks and the kernel table's
`lilou_profile` source (fed with real NeuSight rows written as a profile, since no GPU is guaranteed here)."""
from __future__ import annotations

import csv
import functools
import json
from pathlib import Path

import pytest

from lilou.cli import main
from lilou.data.kernel_schema import FAMILY_SHAPES
from lilou.data.kernel_table import build_source, check_sources, kernel_table
from lilou.data.profiles import (PROVENANCE_FILE, ROW_COLUMNS, ROWS_FILE, SHAPE_COLUMNS, add_profile, read_profile,
                                 write_profile)
from lilou.errors import LilouInputError
from lilou.profile.sweep import MATH_FAMILIES, op_sweep


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def one_line_error(status: int, err: str, fragment: str) -> None:
    assert status == 2 and "Traceback" not in err
    assert err.strip().count("\n") == 0 and fragment in err, err


# ------------------------------------------------------------------------------------------ the sweep

def test_sweep_cases_are_rows_the_kernel_model_can_price() -> None:
    """Every case fills only its family's shape fields, uses NeuSight's op names, and becomes the ONNX nodes the
    kernel model prices (table_kernels.row_nodes): a profiled row is usable as it is."""
    from lilou.latency.kernel_model.table_kernels import row_nodes

    quick, full = op_sweep(size="quick"), op_sweep(size="full")
    assert (len(quick), len(full)) == (688, 1564)
    assert {c.key() for c in quick} <= {c.key() for c in full}
    assert len({c.key() for c in full}) == len(full)
    for case in full:
        assert set(case.shape) <= set(FAMILY_SHAPES[case.family]) & set(SHAPE_COLUMNS), case
        assert case.dtype != "tf32" or case.family in MATH_FAMILIES
        assert row_nodes({"family": case.family, "op": case.op, "dtype": case.dtype, "mode": "forward",
                          "bias": case.op == "linear", **case.shape}), case
    depthwise = [c for c in quick if c.family == "conv" and c.shape["groups"] == c.shape["in_c"] > 1]
    assert len(depthwise) == 5 * 3 * 4  # five depthwise layers x three batches x four precisions
    assert min(c.elements() for c in quick if c.family == "elementwise") == 2  # one-element relu: the launch floor


def test_sweep_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown family attention"):
        op_sweep(families=("attention",))
    with pytest.raises(ValueError, match="unknown dtype fp8"):
        op_sweep(dtypes=("fp8",))


# ------------------------------------------------------------------------------------------ a CPU dry run

def test_cpu_dry_run_writes_a_checked_profile_that_data_add_refuses(tmp_path: Path, capsys) -> None:
    out = tmp_path / "cpu-profile"
    status, stdout, _ = run(capsys, "profile", "ops", "--device", "cpu", "--out", str(out), "--families",
                            "elementwise,norm,softmax,gemm", "--dtypes", "fp32", "--max-elements", "700000",
                            "--repeats", "5", "--warmup", "1")
    assert status == 0
    wanted = [c for c in op_sweep(("elementwise", "norm", "softmax", "gemm"), ("fp32",)) if c.elements() <= 700_000]
    profile = read_profile(out)
    assert (profile.kind, profile.rows) == ("cpu", len(wanted)) and len(wanted) == 29
    assert f"{len(wanted)} rows measured on" in stdout and "dry run" in stdout
    with open(out / ROWS_FILE, encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == ROW_COLUMNS
    assert {r["timing"] for r in rows} == {"host-timer-loop"} and {r["device_kind"] for r in rows} == {"cpu"}
    assert all(float(r["latency_ms"]) > 0 for r in rows)
    assert [(r["family"], r["op"], r["rows"] or r["m"]) for r in rows] == [
        (c.family, c.op, str(c.shape.get("rows", c.shape.get("m")))) for c in wanted]
    provenance = json.loads((out / PROVENANCE_FILE).read_text())
    assert provenance["device"]["kind"] == "cpu" and provenance["software"]["torch"]
    assert provenance["settings"]["max_elements"] == 700_000
    assert sum(provenance["skipped"].values()) == len(op_sweep(("elementwise", "norm", "softmax", "gemm"),
                                                                ("fp32",))) - len(wanted)
    status, _, err = run(capsys, "data", "add", str(out), "--data-dir", str(tmp_path / "root"))
    one_line_error(status, err, "measured on a CPU")
    assert not (tmp_path / "root").exists()


def test_cuda_without_a_gpu_is_one_line(tmp_path: Path, capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    status, _, err = run(capsys, "profile", "ops", "--device", "cuda", "--out", str(tmp_path / "p"))
    one_line_error(status, err, "sees no CUDA device")
    assert not (tmp_path / "p").exists()


def test_cpu_dry_run_of_a_model_writes_its_label_beside_its_graph(tmp_path: Path, capsys) -> None:
    """`lilou profile model`: a zoo CNN timed on the CPU (a real, if CPU, measurement), its weight-free export
    readable by `lilou infer` at the same batch."""
    out = tmp_path / "cnn"
    status, stdout, _ = run(capsys, "profile", "model", "cnn-0", "--device", "cpu", "--out", str(out), "--batch",
                            "2", "--repeats", "3", "--warmup", "1")
    assert status == 0 and "cnn-0 (batch 2, fp32, TF32 conv) on" in stdout
    label = json.loads((out / "label.json").read_text())
    assert (label["model"], label["batch"], label["inputs"], label["timing"]) == (
        "cnn-0", 2, {"x": [2, 3, 64, 64]}, "host-timer-loop")
    assert label["latency_ms"] > 0 and label["device"]["kind"] == "cpu" and label["onnx"] == "model.onnx"
    assert json.loads((out / PROVENANCE_FILE).read_text())["settings"]["batch"] == 2
    status, stdout, _ = run(capsys, "infer", str(out / "model.onnx"), "--gpu", "t4", "--format", "json")
    assert status == 0 and json.loads(stdout)["batch"] == 2


def test_bad_model_profiles_are_one_line(tmp_path: Path, capsys) -> None:
    status, _, err = run(capsys, "profile", "model", "resnet-51", "--device", "cpu", "--out", str(tmp_path / "m"))
    one_line_error(status, err, "unknown zoo model 'resnet-51'")
    status, _, err = run(capsys, "profile", "model", "cnn-0", "--device", "cpu", "--out", str(tmp_path / "m"),
                         "--repeats", "0")
    one_line_error(status, err, "--repeats 0: out of range")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(("argv", "fragment"), [
    (("--families", "gemm,attention"), "unknown family attention"),
    (("--dtypes", "fp8"), "unknown dtype fp8"),
    (("--device", "gpu0"), "give cuda, cuda:N or cpu"),
    (("--repeats", "0"), "--repeats 0: out of range"),
])
def test_bad_profile_options(tmp_path: Path, capsys, argv: tuple[str, ...], fragment: str) -> None:
    status, _, err = run(capsys, "profile", "ops", "--device", "cpu", "--out", str(tmp_path / "p"), *argv)
    one_line_error(status, err, fragment)


# ------------------------------------------------------------------------------------------ GPU profiles

def neusight_t4_adds(datasets_dir: Path, count: int = 20) -> list[dict]:
    """Real rows: NeuSight's first ``count`` `add` calls on the Tesla T4, written as a profile writes them."""
    with open(datasets_dir / "neusight" / "kernels" / "train" / "add" / "Tesla_T4.csv", encoding="utf-8") as handle:
        upstream = [r for _, r in zip(range(count), csv.DictReader(handle))]
    return [{"source": "lilou_profile", "device": "Tesla T4", "device_kind": "cuda", "dtype": "fp32",
             "family": "elementwise", "op": "add", "mode": "forward", "rows": int(r["B"]), "cols": int(r["H"]),
             "latency_ms": float(r["Latency"]), "latency_stat": "mean of the fastest repeats",
             "timing": "cuda-events-eager", "framework": "PyTorch 2.1"} for r in upstream]


def provenance_of(name: str, kind: str) -> dict:
    return {"format": 1, "device": {"name": name, "kind": kind},
            "note": "test fixture: NeuSight's published T4 rows in the profile format"}


def test_a_gpu_profile_becomes_the_lilou_profile_source(datasets_dir: Path, tmp_path: Path, capsys,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LILOU_CACHE_DIR", str(tmp_path / "cache"))
    rows = neusight_t4_adds(datasets_dir)
    write_profile(tmp_path / "t4-run", rows, provenance_of("Tesla T4", "cuda"))
    root = tmp_path / "root"
    assert "lilou_profile" not in check_sources(None, root)
    status, stdout, _ = run(capsys, "data", "add", str(tmp_path / "t4-run"), "--data-dir", str(root))
    assert status == 0 and "20 rows measured on Tesla T4 (t4) added" in stdout
    assert check_sources(None, root)[-1] == "lilou_profile"
    assert "lilou_profile" not in check_sources(None, datasets_dir)  # the shared mirror has no profile
    table = kernel_table(["lilou_profile"], root)
    got = table.project("gpu, subset, family, op, rows, cols, latency_ms, timing").order("rows, cols, latency_ms")
    expected = sorted(("t4", "t4-run", "elementwise", "add", r["rows"], r["cols"], r["latency_ms"], "cuda-events-eager")
                      for r in rows)
    assert sorted(got.fetchall(), key=lambda t: (t[4], t[5], t[6])) == sorted(expected, key=lambda t: (t[4], t[5], t[6]))
    status, _, err = run(capsys, "data", "add", str(tmp_path / "t4-run"), "--data-dir", str(root))
    one_line_error(status, err, "already added")
    status, stdout, _ = run(capsys, "data", "list", "--data-dir", str(root), "--format", "json")
    listed = {entry["name"]: entry for entry in json.loads(stdout)}
    assert status == 0 and listed["lilou_profile"]["rows"] == 20 and listed["lilou_profile"]["gpus"] == ["t4"]
    assert listed["lilou_profile"]["timing"] == ["cuda-events-eager"] and listed["neusight"]["present"] is False
    # a CPU dry run copied in by hand is read and dropped with its reason, never taken for a GPU's rows
    cpu_rows = [{**r, "device": "x86_64", "device_kind": "cpu"} for r in rows[:3]]
    write_profile(root / "lilou_profile" / "cpu-copied", cpu_rows, provenance_of("x86_64", "cpu"))
    build = build_source("lilou_profile", root)
    assert (build.rows, build.dropped) == (20, {"measured on a CPU (a dry run of the sweep)": 3})


def test_data_add_refuses_mig_slices_and_unknown_gpus(datasets_dir: Path, tmp_path: Path) -> None:
    rows = neusight_t4_adds(datasets_dir, 2)
    mig = "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
    write_profile(tmp_path / "mig", [{**r, "device": mig, "device_kind": "mig"} for r in rows], provenance_of(mig, "mig"))
    with pytest.raises(LilouInputError, match="MIG slice"):
        add_profile(tmp_path / "mig", tmp_path / "root")
    write_profile(tmp_path / "odd", [{**r, "device": "NVIDIA Z9000"} for r in rows], provenance_of("NVIDIA Z9000", "cuda"))
    with pytest.raises(LilouInputError, match="not in the GPU database"):
        add_profile(tmp_path / "odd", tmp_path / "root")


def damaged_profile(tmp_path: Path, lines: list[str], name: str, rows_text: str | None = None,
                    provenance_text: str | None = None) -> Path:
    """A T4 profile folder ``name`` whose rows.csv is ``rows_text`` (else ``lines``) and, where given, whose
    provenance.json is ``provenance_text``."""
    folder = tmp_path / name
    write_profile(folder, [], provenance_of("Tesla T4", "cuda"))
    (folder / ROWS_FILE).write_text(rows_text if rows_text is not None else "\n".join(lines) + "\n")
    if provenance_text is not None:
        (folder / PROVENANCE_FILE).write_text(provenance_text)
    return folder


def test_damaged_profiles_are_one_line(datasets_dir: Path, tmp_path: Path) -> None:
    good = tmp_path / "good"
    write_profile(good, neusight_t4_adds(datasets_dir, 3), provenance_of("Tesla T4", "cuda"))
    assert read_profile(good).rows == 3
    lines = (good / ROWS_FILE).read_text().splitlines()

    damaged = functools.partial(damaged_profile, tmp_path, lines)

    negative = lines[2].replace(lines[2].split(",")[ROW_COLUMNS.index("latency_ms")], "-1.0")
    cases = {
        "header": (damaged("header", "a,b\n1,2\n"), "the header is not that of"),
        "negative": (damaged("negative", "\n".join([*lines[:2], negative]) + "\n"),
                     "line 3: latency_ms '-1.0' is not a positive number"),
        "empty": (damaged("empty", lines[0] + "\n"), "no rows"),
        "json": (damaged("json", provenance_text="{not json"), "not JSON"),
        "format": (damaged("format", provenance_text='{"format": 9, "device": {"name": "Tesla T4", "kind": "cuda"}}'),
                   "format 9"),
        "device": (damaged("device", provenance_text='{"format": 1, "device": {"name": "Tesla P4", "kind": "cuda"}}'),
                   "differs from the provenance"),
    }
    for name, (folder, fragment) in cases.items():
        with pytest.raises(LilouInputError, match=fragment) as error:
            read_profile(folder)
        assert "\n" not in str(error.value), name
    huge = damaged("huge")
    with open(huge / ROWS_FILE, "r+b") as handle:  # a sparse 65 MiB file: refused before it is read
        handle.truncate(65 * 2**20)
    with pytest.raises(LilouInputError, match="larger than 64 MiB"):
        read_profile(huge)
    with pytest.raises(LilouInputError, match="not a directory"):
        read_profile(tmp_path / "absent")


def test_launch_floor_is_the_median_of_the_one_element_eager_calls() -> None:
    from lilou.commands.profile import launch_floor_us

    def row(op: str, rows: int, ms: float, timing: str = "cuda-events-eager") -> dict:
        return {"family": "elementwise", "op": op, "rows": rows, "cols": 1, "latency_ms": ms, "timing": timing}

    rows = [row("add", 1, 0.012), row("relu", 1, 0.010), row("mul", 1, 0.020), row("add", 64, 0.5),
            row("add", 1, 0.004, "cuda-graph-replay")]
    assert launch_floor_us(rows) == pytest.approx(12.0)
    assert launch_floor_us([row("add", 64, 0.5)]) is None


def neusight_label(datasets_dir: Path, folder: Path, gpu_dir: str = "Tesla_T4", device: str = "Tesla T4") -> float:
    """A real end-to-end label in the form `lilou profile model` writes: NeuSight's BERT-large (seq 512, batch 8,
    eager FP32, TF32 off, CUDA events) on the T4."""
    measured = json.loads((datasets_dir / "neusight" / "e2e" / gpu_dir / "bert_large-inf-512-8.json").read_text())
    folder.mkdir(parents=True)
    (folder / "label.json").write_text(json.dumps({
        "format": 1, "model": "bert_large", "batch": 8, "seq": 512, "image_size": None, "dtype": "fp32", "tf32": "off",
        "latency_ms": measured["e2e_latency"], "timing": "cuda-events-eager", "device": {"name": device, "kind": "cuda"},
        "note": "test fixture: NeuSight's published label"}))
    return measured["e2e_latency"]


def test_check_puts_the_prediction_beside_a_real_label(datasets_dir: Path, tmp_path: Path, capsys) -> None:
    measured = neusight_label(datasets_dir, tmp_path / "t4-bert")
    status, stdout, err = run(capsys, "profile", "check", str(tmp_path / "t4-bert"), "--format", "json")
    assert status == 0 and "exporting bert_large (batch 8)" in err
    (row,) = json.loads(stdout)
    status, infer_out, _ = run(capsys, "infer", str(tmp_path / "t4-bert" / "model.onnx"), "--gpu", "Tesla T4",
                               "--tf32", "off", "--format", "json")
    predicted = json.loads(infer_out)
    assert (row["gpu"], row["mig"], row["batch"], row["measured_ms"]) == ("t4", None, 8, round(measured, 4))
    assert row["predicted_ms"] == predicted["latency_ms"] and row["interval_ms"] == predicted["interval_ms"]
    assert row["ape_pct"] == round(100 * abs(predicted["latency_ms"] - measured) / measured, 2)
    assert row["inside"] == (predicted["interval_ms"][0] <= measured <= predicted["interval_ms"][1])
    status, table, _ = run(capsys, "profile", "check", str(tmp_path / "t4-bert"))  # the export is reused
    assert status == 0 and f"MAPE {row['ape_pct']:.1f} %" in table
    # the host's own gap (the launch floor of `lilou profile ops`), as `lilou infer --launch-gap-us` composes it
    status, stdout, _ = run(capsys, "profile", "check", str(tmp_path / "t4-bert"), "--launch-gap-us", "10", "--format",
                            "json")
    status_infer, infer_out, _ = run(capsys, "infer", str(tmp_path / "t4-bert" / "model.onnx"), "--gpu", "Tesla T4",
                                     "--tf32", "off", "--launch-gap-us", "10", "--format", "json")
    (gapped,) = json.loads(stdout)
    assert status == status_infer == 0 and gapped["predicted_ms"] == json.loads(infer_out)["latency_ms"]
    assert gapped["predicted_ms"] != row["predicted_ms"]


def test_check_refuses_cpu_and_damaged_labels(datasets_dir: Path, tmp_path: Path, capsys) -> None:
    neusight_label(datasets_dir, tmp_path / "cpu", device="x86_64")
    label = json.loads((tmp_path / "cpu" / "label.json").read_text())
    (tmp_path / "cpu" / "label.json").write_text(json.dumps({**label, "device": {"name": "x86_64", "kind": "cpu"}}))
    status, _, err = run(capsys, "profile", "check", str(tmp_path / "cpu"))
    one_line_error(status, err, "measured on a CPU")
    for name, change, fragment in (("batch", {"batch": 0}, "batch 0 is not a positive integer"),
                                   ("latency", {"latency_ms": "fast"}, "latency_ms 'fast' is not a positive number"),
                                   ("format", {"format": 7}, "not a format-1 label")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "label.json").write_text(json.dumps({**label, "device": {"name": "Tesla T4", "kind": "cuda"},
                                                       **change}))
        status, _, err = run(capsys, "profile", "check", str(folder))
        one_line_error(status, err, fragment)


def test_check_of_a_folder_without_a_label_says_what_it_holds(tmp_path: Path, capsys) -> None:
    """The hint named the files of `profile ops` (rows.csv, provenance.json), not the label `check` reads."""
    status, _, err = run(capsys, "profile", "check", str(tmp_path))
    assert status == 2
    assert err == (f"lilou: error: {tmp_path}/label.json: missing (the --out folder of `lilou profile model` holds "
                   "label.json)\n")


@pytest.mark.parametrize(("change", "fragment"), [
    ({"latency_ms": 1e300}, "line 3: latency_ms 1e+300 is outside 0.0001 to 100000 ms, not a kernel's time"),
    ({"latency_ms": 1e-12}, "line 3: latency_ms 1e-12 is outside 0.0001 to 100000 ms, not a kernel's time"),
    ({"unit": "fp64_tensor"}, "line 3: unit 'fp64_tensor' for a fp32 elementwise row (`lilou profile ops` writes empty)"),
    ({"op": "nonsense"}, "line 3: op 'nonsense' of family 'elementwise' is not one `lilou profile ops` times"),
    ({"mode": "backward"}, "line 3: mode 'backward': `lilou profile ops` times forward calls only"),
    ({"bias": "maybe"}, "line 3: bias 'maybe' for op 'add' (`lilou profile ops` writes 'nothing')"),
    ({"source": "neusight"}, "line 3: source 'neusight' is not 'lilou_profile'"),
    ({"device_kind": "cpu"}, "line 3: device_kind 'cpu' differs from the provenance's 'cuda'"),
    ({"timing": "host-timer-loop"}, "line 3: timing 'host-timer-loop' is not what the provenance's cuda run used"),
    ({"family": "gemm", "op": "linear", "unit": "fp32", "bias": True, "rows": None, "cols": None},
     "line 3: a gemm row needs its shape fields batch, m, n, k (missing: batch, m, n, k)"),
    ("duplicate", "line 3: the same row as line 2 (a measurement is written once)"),
])
def test_data_add_refuses_rows_that_are_not_measurements_of_the_sweep(datasets_dir: Path, tmp_path: Path, capsys,
                                                                      change, fragment: str) -> None:
    """Each of these was added ("N rows ... added", exit 0) and reached the kernel table (or, with device_kind=cpu,
    was counted as added and then dropped by the reader)."""
    rows = neusight_t4_adds(datasets_dir, 3)
    rows[1] = dict(rows[0]) if change == "duplicate" else {**rows[1], **change}
    write_profile(tmp_path / "bad", rows, provenance_of("Tesla T4", "cuda"))
    status, _, err = run(capsys, "data", "add", str(tmp_path / "bad"), "--data-dir", str(tmp_path / "root"))
    one_line_error(status, err, f"{tmp_path / 'bad' / ROWS_FILE}, {fragment}")
    assert not (tmp_path / "root").exists()


def test_data_add_refuses_a_profile_already_added_under_another_name(datasets_dir: Path, tmp_path: Path,
                                                                     capsys) -> None:
    write_profile(tmp_path / "t4-run", neusight_t4_adds(datasets_dir, 3), provenance_of("Tesla T4", "cuda"))
    root = tmp_path / "root"
    assert run(capsys, "data", "add", str(tmp_path / "t4-run"), "--data-dir", str(root))[0] == 0
    status, _, err = run(capsys, "data", "add", str(tmp_path / "t4-run"), "--data-dir", str(root), "--name", "again")
    added = root / "lilou_profile" / "t4-run"
    one_line_error(status, err, f"{tmp_path / 't4-run'}: 3 of its 3 rows are already added as {added}")
    # reordered, or a part of them, under another name: added before (the same measurements counted twice)
    rows = neusight_t4_adds(datasets_dir, 5)
    write_profile(tmp_path / "reordered", rows[2::-1], provenance_of("Tesla T4", "cuda"))
    write_profile(tmp_path / "overlap", rows[2:], provenance_of("Tesla T4", "cuda"))
    for name, shared in (("reordered", 3), ("overlap", 1)):
        status, _, err = run(capsys, "data", "add", str(tmp_path / name), "--data-dir", str(root))
        assert (status, err) == (2, f"lilou: error: {tmp_path / name}: {shared} of its 3 rows are already added as "
                                    f"{added}; the same measurements twice would count double\n")
    write_profile(tmp_path / "new", rows[3:], provenance_of("Tesla T4", "cuda"))
    assert run(capsys, "data", "add", str(tmp_path / "new"), "--data-dir", str(root))[0] == 0
    assert sorted(p.name for p in (root / "lilou_profile").iterdir()) == ["new", "t4-run"]
    assert run(capsys, "data", "add", str(tmp_path / "t4-run"), "--data-dir", str(root), "--force")[0] == 0


def test_profile_ops_never_overwrites_a_profile_without_force(datasets_dir: Path, tmp_path: Path, capsys) -> None:
    """`--out` holding a 20-row GPU profile was silently replaced by a header-only CPU dry run."""
    out = tmp_path / "t4-run"
    write_profile(out, neusight_t4_adds(datasets_dir, 20), provenance_of("Tesla T4", "cuda"))
    before = {name: (out / name).read_bytes() for name in (ROWS_FILE, PROVENANCE_FILE)}
    argv = ("profile", "ops", "--device", "cpu", "--out", str(out), "--families", "softmax", "--dtypes", "fp32",
            "--max-elements", "5000", "--warmup", "0", "--repeats", "1")
    status, _, err = run(capsys, *argv)
    one_line_error(status, err, f"--out {out}: already holds a profile (rows.csv and provenance.json); choose another "
                                "--out, or --force to replace it")
    assert {name: (out / name).read_bytes() for name in before} == before
    status, stdout, _ = run(capsys, *argv, "--force")
    assert status == 0 and "1 rows measured on" in stdout
    assert json.loads((out / PROVENANCE_FILE).read_text())["device"]["kind"] == "cpu"


def test_data_add_bad_root_names_and_mig_strings_are_one_line(datasets_dir: Path, tmp_path: Path, capsys) -> None:
    """A file as --data-dir exited 1 ("input/output failed"), --name ' ' made a folder named by one space, and a MIG
    device string under kind cuda got the advice to add it to gpus.yaml."""
    rows = neusight_t4_adds(datasets_dir, 3)
    write_profile(tmp_path / "t4-run", rows, provenance_of("Tesla T4", "cuda"))
    (tmp_path / "afile").write_text("x\n")
    status, _, err = run(capsys, "data", "add", str(tmp_path / "t4-run"), "--data-dir", str(tmp_path / "afile"))
    one_line_error(status, err, f"--data-dir {tmp_path / 'afile'}: not a folder")
    for name in (" ", "", "..", "a/b", ".hidden", "-x", "tab\\there"):
        status, _, err = run(capsys, "data", "add", str(tmp_path / "t4-run"), "--data-dir", str(tmp_path / "root"),
                             f"--name={name}")
        one_line_error(status, err, f"{name!r} is not a folder name for the profile: give --name of letters")
    assert not (tmp_path / "root").exists()
    mig = "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
    write_profile(tmp_path / "mig", [{**r, "device": mig} for r in rows], provenance_of(mig, "cuda"))
    status, _, err = run(capsys, "data", "add", str(tmp_path / "mig"), "--data-dir", str(tmp_path / "root"))
    one_line_error(status, err, f"measured on a MIG slice ({mig}); the kernel table has no MIG column yet")
    assert run(capsys, "data", "add", str(tmp_path / "t4-run"), "--data-dir", str(tmp_path / "root"), "--name",
               "t4_2026-12.a")[0] == 0


def test_data_add_never_writes_into_a_curated_mirror(datasets_dir: Path, tmp_path: Path, capsys,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """With LILOU_DATA_DIR pointing at the shared mirror (as CI sets it), `data add` wrote lilou_profile/ into it."""
    write_profile(tmp_path / "t4-run", neusight_t4_adds(datasets_dir, 3), provenance_of("Tesla T4", "cuda"))
    mirror = tmp_path / "mirror"
    (mirror / "vidur").mkdir(parents=True)
    (mirror / "vidur" / "SOURCE").write_text((datasets_dir / "vidur" / "SOURCE").read_text())
    status, _, err = run(capsys, "data", "add", str(tmp_path / "t4-run"), "--data-dir", str(mirror))
    one_line_error(status, err, f"{mirror} is a curated mirror (it has vidur/SOURCE); `lilou data add` never writes "
                                "into it: choose another data root with --data-dir")
    monkeypatch.setenv("LILOU_DATA_DIR", str(datasets_dir))
    status, _, err = run(capsys, "data", "add", str(tmp_path / "t4-run"))
    one_line_error(status, err, "is a curated mirror (it has ")
    assert not (mirror / "lilou_profile").exists() and not (datasets_dir / "lilou_profile").exists()


def test_provenance_records_the_host_cpu_model_from_proc_cpuinfo(tmp_path: Path) -> None:
    """platform.processor() is empty on Linux: host_cpu was null in every provenance.json written there."""
    from lilou.profile.provenance import host_cpu

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8375C CPU "
                       "@ 2.90GHz\nflags\t\t: fpu\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8375C CPU "
                       "@ 2.90GHz\n")
    assert host_cpu(str(cpuinfo)) == "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"
    if Path("/proc/cpuinfo").is_file() and "model name" in Path("/proc/cpuinfo").read_text():
        from lilou.profile.provenance import software

        assert software()["host_cpu"] == host_cpu()
        assert host_cpu()


# ------------------------------------------------------------------------------------------ hostile input (session 47)

@pytest.mark.parametrize(("change", "fragment"), [
    ({"rows": "+12"}, "line 3: shape field rows '+12' is not an integer from 0 to 2147483647"),
    ({"rows": " 12"}, "line 3: shape field rows ' 12' is not an integer from 0 to 2147483647"),
    ({"rows": "1_000"}, "line 3: shape field rows '1_000' is not an integer from 0 to 2147483647"),
    ({"cols": "\u0661\u0662"}, "line 3: shape field cols '\u0661\u0662' is not an integer from 0 to 2147483647"),
    ({"rows": "2147483648"}, "line 3: shape field rows '2147483648' is not an integer from 0 to 2147483647"),
    ({"rows": "1" + "0" * 400}, f"line 3: shape field rows '1{'0' * 39}' is not an integer from 0 to 2147483647"),
    ({"latency_ms": "nan"}, "line 3: latency_ms 'nan' is not a positive number"),
    ({"latency_ms": "-0.01"}, "line 3: latency_ms '-0.01' is not a positive number"),
    ({"latency_ms": "0.0_1"}, "line 3: latency_ms '0.0_1' is not a positive number"),
    ({"latency_ms": "1e400"}, "line 3: latency_ms 1e400 is outside 0.0001 to 100000 ms, not a kernel's time"),
])
def test_data_add_refuses_numbers_a_profile_never_writes(datasets_dir: Path, tmp_path: Path, capsys, change,
                                                         fragment: str) -> None:
    """int() and float() took each of the shape fields (exit 0); the table's reader then read `+12` as 12 but 10**400
    and other scripts' digits as NULL shapes of kernel-table rows."""
    rows = neusight_t4_adds(datasets_dir, 3)
    rows[1] = {**rows[1], **change}
    write_profile(tmp_path / "bad", rows, provenance_of("Tesla T4", "cuda"))
    status, _, err = run(capsys, "data", "add", str(tmp_path / "bad"), "--data-dir", str(tmp_path / "root"))
    one_line_error(status, err, f"{tmp_path / 'bad' / ROWS_FILE}, {fragment}")
    assert not (tmp_path / "root").exists()


def test_damaged_csv_and_json_are_one_line(datasets_dir: Path, tmp_path: Path, capsys) -> None:
    """An unterminated quote swallowed the 18 lines after it into one field ("2 rows ... added" of 20), as a rows.csv
    cut at a line's end was added with what was left; a field over csv's limit, JSON nested 100,000 deep or a
    5,000-digit number were internal errors (exit 1)."""
    write_profile(tmp_path / "good", neusight_t4_adds(datasets_dir, 20), provenance_of("Tesla T4", "cuda"))
    lines = (tmp_path / "good" / ROWS_FILE).read_text().splitlines()

    damaged = functools.partial(damaged_profile, tmp_path, lines)

    quoted = lines[2].rsplit(",", 1)[0] + ',"PyTorch 2.1'
    cases = [
        (damaged("quote", "\n".join([*lines[:2], quoted, *lines[3:]]) + "\n"),
         f"{ROWS_FILE}, line 21: not CSV as a profile writes it (unexpected end of data)"),
        (damaged("field", "\n".join([*lines[:2], lines[2].rsplit(",", 1)[0] + "," + "x" * 200_000]) + "\n"),
         f"{ROWS_FILE}, line 3: not CSV as a profile writes it (field larger than field limit (131072))"),
        (damaged("deep", provenance_text="[" * 100_000 + "]" * 100_000),
         f"{PROVENANCE_FILE}: not a file `lilou profile` writes (nested too deep)"),
        (damaged("digits", provenance_text='{"format": ' + "9" * 5000 + "}"),
         f"{PROVENANCE_FILE}: not a file `lilou profile` writes (a number too long)"),
        (damaged("long", provenance_text=json.dumps({"format": 1, "device": {"name": "T" * 10_000, "kind": "cuda"}})),
         f"{PROVENANCE_FILE}: a device name of 10000 characters, longer than any PyTorch reports"),
    ]
    for folder, fragment in cases:
        status, _, err = run(capsys, "data", "add", str(folder), "--data-dir", str(tmp_path / "root"))
        assert err == f"lilou: error: {folder / fragment}\n" and status == 2
    cut = damaged("cut", "\n".join(lines[:15]) + "\n", json.dumps({**provenance_of("Tesla T4", "cuda"), "rows": 20}))
    status, _, err = run(capsys, "data", "add", str(cut), "--data-dir", str(tmp_path / "root"))
    assert (status, err) == (2, f"lilou: error: {cut / ROWS_FILE}: 14 rows, {PROVENANCE_FILE} says 20 were measured (a "
                                "truncated or edited copy?)\n")
    label = tmp_path / "label"
    label.mkdir()
    (label / "label.json").write_text("[" * 100_000 + "]" * 100_000)
    status, _, err = run(capsys, "profile", "check", str(label))
    assert status == 2 and err == f"lilou: error: {label}/label.json: not a file `lilou profile` writes (nested too deep)\n"
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize(("device", "change", "message"), [
    ("Tesla T4", {"dtype": "bf16"},
     "bf16 rows on t4 (compute capability 7.5), not what `lilou profile ops` measures there: not added"),
    ("Tesla T4", {"dtype": "fp16", "family": "gemm", "op": "linear", "unit": "fp16", "bias": True, "rows": None,
                  "cols": None, "batch": 1, "m": 64, "n": 64, "k": 64},
     "fp16 rows on the unit 'fp16' on t4 (compute capability 7.5), not what `lilou profile ops` measures there: "
     "not added"),
    ("Tesla P4", {"dtype": "fp16", "family": "gemm", "op": "linear", "unit": "fp16_tensor", "bias": True, "rows": None,
                  "cols": None, "batch": 1, "m": 64, "n": 64, "k": 64},
     "fp16 rows on the unit 'fp16_tensor' on p4 (compute capability 6.1), not what `lilou profile ops` measures "
     "there: not added"),
    ("NVIDIA A100", {}, "'NVIDIA A100' stands for several GPUs of the database (a100-pcie-40gb, a100-sxm4-40gb, "
                        "a100-pcie-80gb, a100-sxm4-80gb), not the one measured"),
])
def test_data_add_refuses_precisions_the_gpu_lacks_and_names_of_several_gpus(datasets_dir: Path, tmp_path: Path,
                                                                             capsys, device: str, change,
                                                                             message: str) -> None:
    """Each was added (exit 0): BF16 rows of a T4, which the sweep skips there; an ambiguous name as the A100 40 GB."""
    rows = [{**r, "device": device, **change} for r in neusight_t4_adds(datasets_dir, 3)]
    write_profile(tmp_path / "bad", rows, provenance_of(device, "cuda"))
    status, _, err = run(capsys, "data", "add", str(tmp_path / "bad"), "--data-dir", str(tmp_path / "root"))
    assert (status, err) == (2, f"lilou: error: {tmp_path / 'bad'}: {message}\n")
    assert not (tmp_path / "root").exists()


def test_data_add_names_the_root_and_the_sources_training_needs(datasets_dir: Path, tmp_path: Path, capsys,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """It said `make train-kernels`, which reads $LILOU_DATA_DIR (here the shared mirror), not the root added to."""
    monkeypatch.setenv("LILOU_DATA_DIR", str(datasets_dir))
    write_profile(tmp_path / "t4-run", neusight_t4_adds(datasets_dir, 3), provenance_of("Tesla T4", "cuda"))
    root = tmp_path / "root"
    status, stdout, _ = run(capsys, "data", "add", str(tmp_path / "t4-run"), "--data-dir", str(root))
    assert status == 0 and stdout.splitlines()[-1] == (
        f"  the kernel table reads them as the source lilou_profile; retrain with `LILOU_DATA_DIR={root} make "
        "train-kernels`, once this root also holds the published sources it lacks (neusight, aiconfigurator, vidur, "
        f"deepbench, liger_kernel): `lilou data fetch NAME --data-dir {root}`")
    monkeypatch.setenv("LILOU_DATA_DIR", str(root))
    for name in ("neusight", "aiconfigurator", "vidur", "deepbench", "liger_kernel"):
        (root / name).mkdir()
    status, stdout, _ = run(capsys, "data", "add", str(tmp_path / "t4-run"), "--force")
    assert status == 0 and stdout.splitlines()[-1] == (
        "  the kernel table reads them as the source lilou_profile; retrain with `make train-kernels`")


def test_check_refuses_bad_labels_before_any_export(datasets_dir: Path, tmp_path: Path, capsys) -> None:
    """An ambiguous GPU was priced as the A100 SXM4 40 GB; an unknown GPU or MIG profile, or a batch of 2**20, was
    found only after exporting the model (the last an internal error allocating 631 GB); 1e-300 ms gave an APE of
    1e304 %."""
    neusight_label(datasets_dir, tmp_path / "ok")
    label = json.loads((tmp_path / "ok" / "label.json").read_text())
    cases = [
        ({"device": {"name": "NVIDIA A100", "kind": "cuda"}},
         "'NVIDIA A100' stands for several GPUs of the database (a100-pcie-40gb, a100-sxm4-40gb, a100-pcie-80gb, "
         "a100-sxm4-80gb), not the one measured"),
        ({"device": {"name": "NVIDIA Z9000", "kind": "cuda"}},
         "'NVIDIA Z9000' is not in the GPU database (`lilou gpus`); add it to lilou/hardware/gpus.yaml with its "
         "sources first"),
        ({"device": {"name": "NVIDIA A100-SXM4-80GB MIG 9g.99gb", "kind": "mig"}},
         "GPU 'a100-sxm4-80gb' has no MIG profile '9g.99gb'; valid profiles: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, "
         "3g.40gb, 4g.40gb, 7g.80gb"),
        ({"model": "nosuch"}, "unknown zoo model 'nosuch'; see `lilou zoo list`"),
        ({"model": "resnet50", "seq": None, "batch": 2**20},
         "batch 1048576 of resnet50 at these shapes is more than 536,870,912 tokens or pixels, more than the export "
         "here can hold"),
    ]
    for index, (change, message) in enumerate(cases):
        folder = tmp_path / f"bad{index}"
        folder.mkdir()
        (folder / "label.json").write_text(json.dumps({**label, **change}))
        status, _, err = run(capsys, "profile", "check", str(tmp_path / "ok"), str(folder))
        assert (status, err) == (2, f"lilou: error: {folder}: {message}\n")
    (tmp_path / "ok" / "label.json").write_text(json.dumps({**label, "latency_ms": 1e-300}))
    status, _, err = run(capsys, "profile", "check", str(tmp_path / "ok"))
    assert (status, err) == (2, f"lilou: error: {tmp_path}/ok/label.json: latency_ms 1e-300 is outside 0.0001 to "
                                "100000 ms, not a measurement\n")
    assert sorted(p.name for p in tmp_path.glob("*/model.onnx")) == []
