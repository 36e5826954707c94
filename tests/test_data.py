"""lilou.data: manifests against the real mirror, checksummed fetch, typed NeuSight loaders."""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from lilou.cli import _ArgumentParser
from lilou.commands import data as data_command
from lilou.data import DATASETS, data_root, dataset_dir, get_dataset
from lilou.data.fetch import ChecksumError, FetchError, fetch
from lilou.data.neusight import load_device_configs, load_e2e, load_kernels
from lilou.latency.kernel_model.measured import cost_nodes, kernel_cost, table_costs
from lilou.errors import LilouInputError, MissingDataError
from lilou.graph.costs import CostInput, TensorInfo, node_cost

LINEAR_T4 = "kernels/train/linear/Tesla_T4.csv"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def upstream_sums(folder: Path) -> dict[str, str]:
    lines = (folder / "UPSTREAM_SHA256SUMS").read_text().splitlines()
    return {path: digest for digest, path in (line.split(None, 1) for line in lines if line.strip())}


def data_lines(path: Path) -> int:
    with path.open(newline="") as handle:
        return sum(1 for _ in handle) - 1


# ------------------------------------------------------------------------ manifests


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_manifest_covers_every_local_file(datasets_dir: Path, name: str) -> None:
    folder = datasets_dir / name
    local = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert {f.path for f in get_dataset(name).files} == local


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_manifest_hashes_match_the_mirror_except_held_back(datasets_dir: Path, name: str) -> None:
    dataset = get_dataset(name)
    for entry in dataset.files:
        if entry.origin in ("verbatim", "copied", "derived"):
            assert sha256(datasets_dir / name / entry.path) == entry.sha256, entry.path
            assert (datasets_dir / name / entry.path).stat().st_size == entry.size
        if entry.downloadable:
            assert entry.upstream in dataset.upstreams and len(entry.sha256 or "") == 64


def test_manifest_maps_layout_to_upstream_paths(datasets_dir: Path) -> None:
    files = {f.path: f for f in get_dataset("neusight").files}
    linear = files[LINEAR_T4]
    assert linear.origin == "verbatim"
    assert linear.upstream_path == "scripts/asplos/data/dataset/train/collect/linear/p2.1.0/Tesla T4.csv"  # spaces upstream
    a100 = files["kernels/train/bmm/NVIDIA_A100-PCIE-40GB.csv"]
    assert get_dataset("neusight").url(a100) == (
        "https://raw.githubusercontent.com/sitar-lab/NeuSight/6945927d9afcca2b9daf021f8395e53edc5b4eef/"
        "scripts/asplos/data/dataset/train/collect/bmm/p2.1.0/NVIDIA%20A100-PCIE-40GB.csv")
    # Held-back files keep the upstream hash, which the local copy does not match.
    sums = upstream_sums(datasets_dir / "neusight")
    held = [f for f in files.values() if f.origin == "held-back"]
    assert {f.path for f in held} == {f"kernels/test/{n}.csv" for n in ("bmm", "elem", "linear", "ln", "softmax", "vec")}
    for entry in held:
        assert entry.sha256 == sums[entry.upstream_path] != sha256(datasets_dir / "neusight" / entry.path)
    assert files["kernels/test/vec.csv"].upstream_path.endswith("/test/vec.csv")  # not habitat.csv (same hash)


def test_llm_energy_files_name_their_own_repository() -> None:
    dataset = get_dataset("llm_energy")
    files = {f.path: f for f in dataset.files}
    card = files["mlenergy_v3_2025/DATASET_CARD.md"]
    assert dataset.upstreams[card.upstream].repo == "ml-energy/data"
    assert files["mlenergy_v1_2023/models.json"].upstream_path == "data/legacy/models.json"
    assert not files["mlenergy_v2_2024/all_runs_flat.csv"].downloadable  # derived here


# ---------------------------------------------------------------------------- fetch


def test_fetch_from_a_file_mirror_reproduces_files_and_resumes(datasets_dir: Path, tmp_path: Path) -> None:
    mirror = datasets_dir.resolve().as_uri()
    wanted = [LINEAR_T4, "device_configs/*", "SOURCE"]
    report = fetch("neusight", data_dir=tmp_path, files=wanted, progress=False, mirror=mirror)
    assert LINEAR_T4 in report.downloaded and len(report.downloaded) == 10
    assert report.not_downloadable == ["SOURCE"]
    got = tmp_path / "neusight" / LINEAR_T4
    entry = next(f for f in get_dataset("neusight").files if f.path == LINEAR_T4)
    assert sha256(got) == entry.sha256 and got.stat().st_size == entry.size
    assert not [p for p in (tmp_path / "neusight").rglob("*") if p.name.startswith("tmp")]  # pooch's temporaries

    again = fetch("neusight", data_dir=tmp_path, files=wanted, progress=True, mirror=mirror)
    assert again.downloaded == [] and len(again.present) == 10


def test_fetch_rejects_a_corrupted_source_and_leaves_nothing(datasets_dir: Path, tmp_path: Path) -> None:
    bad_mirror = tmp_path / "mirror"
    source = bad_mirror / "neusight" / LINEAR_T4
    source.parent.mkdir(parents=True)
    raw = bytearray((datasets_dir / "neusight" / LINEAR_T4).read_bytes())
    raw[200] ^= 0x01  # same size, one bit off
    source.write_bytes(bytes(raw))
    target_root = tmp_path / "data"
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        fetch("neusight", data_dir=target_root, files=[LINEAR_T4], progress=False, mirror=bad_mirror.as_uri())
    folder = target_root / "neusight" / "kernels" / "train" / "linear"
    assert not (folder / "Tesla_T4.csv").exists()
    assert list(folder.iterdir()) == []  # no temporary file either


def test_fetch_replaces_a_wrong_local_copy(datasets_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "neusight" / LINEAR_T4
    target.parent.mkdir(parents=True)
    target.write_text("stale\n")
    report = fetch("neusight", data_dir=tmp_path, files=[LINEAR_T4], progress=False,
                   mirror=datasets_dir.resolve().as_uri())
    assert report.downloaded == [LINEAR_T4]
    assert sha256(target) == sha256(datasets_dir / "neusight" / LINEAR_T4)


def test_fetch_of_a_held_back_file_must_match_upstream(datasets_dir: Path, tmp_path: Path) -> None:
    # The local mirror's copy lacks the H100/L4 rows, so it is not what upstream publishes.
    with pytest.raises(ChecksumError):
        fetch("neusight", data_dir=tmp_path, files=["kernels/test/ln.csv"], progress=False,
              mirror=datasets_dir.resolve().as_uri())
    assert not (tmp_path / "neusight" / "kernels" / "test" / "ln.csv").exists()


def test_fetch_reports_missing_files_and_bad_patterns(tmp_path: Path) -> None:
    empty_mirror = tmp_path / "mirror"
    empty_mirror.mkdir()
    with pytest.raises(FetchError, match="cannot download"):
        fetch("wattgpu", data_dir=tmp_path / "data", progress=False, mirror=empty_mirror.as_uri(), retries=0)
    with pytest.raises(LilouInputError, match="no file of wattgpu matches"):
        fetch("wattgpu", data_dir=tmp_path / "data", files=["nope/*"], progress=False)
    with pytest.raises(LilouInputError, match="unknown dataset"):
        fetch("imagenet", data_dir=tmp_path)


# ---------------------------------------------------------------------------- paths


def test_data_root_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LILOU_DATA_DIR", str(tmp_path / "env"))
    assert data_root(tmp_path / "arg") == tmp_path / "arg"
    assert data_root() == tmp_path / "env"
    monkeypatch.delenv("LILOU_DATA_DIR")
    checkout = Path(__file__).resolve().parents[1] / "datasets"
    expected = checkout if (checkout / "README.md").is_file() else Path.home() / ".cache" / "lilou" / "datasets"
    assert data_root() == expected


def test_missing_data_says_how_to_fetch(tmp_path: Path) -> None:
    for call in (lambda: dataset_dir("neusight", tmp_path), lambda: load_kernels(data_dir=tmp_path),
                 lambda: load_e2e(data_dir=tmp_path)):
        with pytest.raises(MissingDataError) as info:
            call()
        message = str(info.value)
        assert "lilou data fetch neusight" in message and "LILOU_DATA_DIR" in message and "\n" not in message
    (tmp_path / "neusight" / "kernels" / "train").mkdir(parents=True)
    with pytest.raises(MissingDataError, match="kernels/train/linear"):
        load_kernels(ops=["linear"], data_dir=tmp_path)
    with pytest.raises(MissingDataError, match="kernels/test/bmm.csv"):
        load_kernels("test", ops=["bmm"], data_dir=tmp_path)


# -------------------------------------------------------------------------- loaders


def test_first_linear_row_on_t4(datasets_dir: Path) -> None:
    table = load_kernels("train", ops=["linear"], devices=["Tesla T4"], data_dir=datasets_dir, limit_per_file=3)
    assert len(table) == 3
    row = table[0]
    assert (row.op, row.family, row.device, row.gpu) == ("linear", "gemm", "Tesla T4", "t4")
    assert row.shape == {"B": 1, "M": 58, "N": 13, "K": 141}
    assert row.latency_ms == 0.052213333547115326
    assert row.kernel_name == "volta_sgemm_32x128_tn" and row.kernels == ("volta_sgemm_32x128_tn",)
    assert row.grid == (5, 1, 1) and row.block == (256, 1, 1)
    assert (row.warps_per_sm, row.blocks_per_sm) == (1.0, 0.125)
    assert row.large is False
    flops, read, written = table_costs(table)[0]
    assert flops == 2 * 1 * 58 * 13 * 141 + 1 * 58 * 141
    assert read == 4 * (58 * 13 + 13 * 141 + 141) and written == 4 * 58 * 141


def test_row_counts_per_op_match_the_csv(datasets_dir: Path) -> None:
    folder = datasets_dir / "neusight" / "kernels" / "train"
    table = load_kernels("train", devices=["t4"], data_dir=datasets_dir)
    for op_dir in sorted(folder.iterdir()):
        expected = data_lines(op_dir / "Tesla_T4.csv")
        assert int((table.op == op_dir.name).sum()) == expected, op_dir.name
    assert set(table.gpu.tolist()) == {"t4"}


def test_test_split_reads_each_row_once(datasets_dir: Path) -> None:
    folder = datasets_dir / "neusight" / "kernels" / "test"
    table = load_kernels("test", ops=["ln", "softmax", "add", "addu"], data_dir=datasets_dir)
    assert int((table.op == "ln").sum()) == data_lines(folder / "ln.csv")  # vec.csv repeats them
    assert table.large.all()
    add = table.take(table.op == "add")
    row = add[0]
    assert row.kernels == () and table_costs(add)[0, 0] == row.shape["B"] * row.shape["H"]
    first_addu = int((table.op == "addu").argmax())
    addu = table[first_addu]
    elements = addu.shape["B"] * addu.shape["H"]
    _, read, written = table_costs(table.take([first_addu]))[0]
    assert (read, written) == (4 * elements + 4, 4 * elements)  # the scalar: a 0-d tensor
    assert len(load_kernels("test", ops=["conv"], data_dir=datasets_dir)) == 0  # no conv test file


def test_conv_and_norm_costs_use_the_graph_formulas(datasets_dir: Path) -> None:
    convs = load_kernels("train", ops=["conv"], devices=["Tesla_T4"], data_dir=datasets_dir, limit_per_file=1)
    conv = convs[0]
    assert conv.shape == {"B": 38, "C_in": 893, "C_out": 326, "kernel_size": 3, "input_size": 5,
                          "stride": 1, "padding": 1}
    flops, read, written = table_costs(convs)[0]
    assert flops == 2 * (38 * 326 * 5 * 5) * (893 * 3 * 3)
    assert read == 4 * (38 * 893 * 25 + 326 * 893 * 9) and written == 4 * 38 * 326 * 25
    assert len(conv.kernels) == 4 and "winograd" in conv.kernels[0]
    ln = kernel_cost("ln", {"B": 60, "H": 272})
    onnx = node_cost(CostInput("LayerNormalization", {"axis": -1}, [
        TensorInfo("x", (60, 272), "float32", 4), TensorInfo("s", (272,), "float32", 4),
        TensorInfo("b", (272,), "float32", 4)], [TensorInfo("y", (60, 272), "float32", 4)]))
    assert ln == onnx


def test_linear_cost_equals_a_gemm_node() -> None:
    shape = {"B": 3, "M": 7, "N": 11, "K": 5}
    assert [n.op for n in cost_nodes("linear", shape)] == ["MatMul", "Add"]
    gemm = node_cost(CostInput("Gemm", {"transB": 0}, [
        TensorInfo("a", (21, 11), "float32", 4), TensorInfo("w", (11, 5), "float32", 4),
        TensorInfo("c", (5,), "float32", 4)], [TensorInfo("y", (21, 5), "float32", 4)]))
    assert kernel_cost("linear", shape) == gemm


def test_loader_rejects_unknown_names(datasets_dir: Path) -> None:
    with pytest.raises(LilouInputError, match="unknown NeuSight op"):
        load_kernels(ops=["matmul"], data_dir=datasets_dir)
    with pytest.raises(LilouInputError, match="unknown split"):
        load_kernels("val", data_dir=datasets_dir)
    with pytest.raises(LilouInputError, match="unknown device"):
        load_kernels(ops=["add"], devices=["Tesla T5"], data_dir=datasets_dir)


def test_e2e_labels(datasets_dir: Path) -> None:
    labels = load_e2e(datasets_dir)
    bert = [x for x in labels if (x.device, x.model, x.seq, x.batch, x.fusion) == ("Tesla T4", "bert_large", 512, 8, False)]
    assert len(bert) == 1
    assert bert[0].latency_ms == 694.4645385742188 and bert[0].gpu == "t4"
    assert bert[0].node_csv is not None and bert[0].node_csv.name == "bert_large-inf-512-8.csv"
    fused = [x for x in labels if x.fusion]
    assert fused and all(x.device == "NVIDIA A100-PCIE-40GB" for x in fused)
    assert {x.device for x in labels} == {"Tesla T4", "Tesla P4", "Tesla P100-PCIE-16GB", "Tesla V100-PCIE-32GB",
                                          "NVIDIA A100-PCIE-40GB"}


def test_device_configs(datasets_dir: Path) -> None:
    configs = load_device_configs(datasets_dir)
    t4 = configs["Tesla T4"]
    assert (t4.gpu, t4.sms, t4.memory_bandwidth_gbs, t4.fp32_gflops, t4.l2_mb) == ("t4", 40, 320.0, 8141.0, 4.0)
    assert configs["NVIDIA A100 80GB PCIe"].file_stem == "NVIDIA_A100_80GB_PCIe"


# ------------------------------------------------------------------------------ CLI


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = _ArgumentParser(prog="lilou")
    data_command.register(parser.add_subparsers(dest="command", parser_class=_ArgumentParser))
    return parser.parse_args(argv)


def test_cli_list_json(datasets_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse(["data", "list", "--format", "json", "--data-dir", str(datasets_dir)])
    assert args.handler(args) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(DATASETS)
    assert rows["neusight"]["present"] is True and rows["neusight"]["state"] == "complete"
    assert rows["neusight"]["licence"] == "MIT" and rows["neusight"]["kind"] == "kernels"
    assert rows["neusight"]["root"] == str(datasets_dir)


def test_cli_fetch_and_list_table(datasets_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse(["data", "fetch", "wattgpu", "--data-dir", str(tmp_path), "--quiet",
                   "--mirror", datasets_dir.resolve().as_uri(), "--files", "*.csv"])
    assert args.handler(args) == 0
    assert "2 downloaded" in capsys.readouterr().out
    args = _parse(["data", "list", "--data-dir", str(tmp_path)])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "wattgpu" in out and "partial (2/3)" in out
    # the held-back GPUs are named (a listing showed GPU counts only, and no word of them)
    assert "held back: rows measured on H100 (every variant) and L4 GPUs, in every source, are kept out of the" in out
    with pytest.raises(LilouInputError):
        _parse(["data", "fetch", "imagenet"])
    shutil.rmtree(tmp_path / "wattgpu")


def test_cli_list_refuses_a_named_data_root_that_is_not_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A mistyped --data-dir (or $LILOU_DATA_DIR) listed every source absent with exit 0; the default root, which a
    fresh install has not created yet, is still listed."""
    missing = tmp_path / "no-such-mirror"
    with pytest.raises(LilouInputError, match=rf"^data root {missing} \(--data-dir {missing}\) does not exist; "
                                              rf"`lilou data fetch NAME --data-dir {missing}` creates it$"):
        args = _parse(["data", "list", "--data-dir", str(missing)])
        args.handler(args)
    monkeypatch.setenv("LILOU_DATA_DIR", str(missing))
    with pytest.raises(LilouInputError, match=rf"\(LILOU_DATA_DIR={missing}\) does not exist"):
        args = _parse(["data", "list"])
        args.handler(args)
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    with pytest.raises(LilouInputError, match=rf"^data root {a_file} \(--data-dir {a_file}\) is not a folder$"):
        args = _parse(["data", "list", "--data-dir", str(a_file)])
        args.handler(args)
    monkeypatch.delenv("LILOU_DATA_DIR")
    monkeypatch.setattr("lilou.data.paths.checkout_datasets_dir", lambda: None)
    monkeypatch.setattr("lilou.data.paths.USER_CACHE", missing)
    args = _parse(["data", "list", "--format", "json"])
    assert args.handler(args) == 0
    assert {row["present"] for row in json.loads(capsys.readouterr().out)} == {False}


def test_fetch_never_rewrites_a_curated_mirror(datasets_dir: Path, tmp_path: Path) -> None:
    mirror = tmp_path / "neusight"
    (mirror / "kernels" / "test").mkdir(parents=True)
    shutil.copy(datasets_dir / "neusight" / "SOURCE", mirror / "SOURCE")
    held_back = mirror / "kernels" / "test" / "ln.csv"
    shutil.copy(datasets_dir / "neusight" / "kernels" / "test" / "ln.csv", held_back)
    before = sha256(held_back)
    with pytest.raises(LilouInputError, match="curated mirror"):
        fetch("neusight", data_dir=tmp_path, files=["kernels/test/ln.csv"], progress=False,
              mirror=(tmp_path / "nowhere").as_uri())
    assert sha256(held_back) == before


def test_the_training_loader_leaves_out_unusable_and_held_back_rows(tmp_path: Path, datasets_dir: Path) -> None:
    """The loader the FP32 kernel model trains on kept NaN, negative, zero and infinite latencies, crashed on an
    empty one or a cut-off line, and kept H100 and L4 rows (the upstream test files hold them; only the curated
    mirror left them out), where the kernel table drops and holds back the same rows."""
    source = datasets_dir / "neusight" / "kernels" / "train" / "linear" / "Tesla_T4.csv"
    header, first = source.read_text().splitlines()[:2]
    good = first.split(",")
    i_latency, i_device = header.split(",").index("Latency"), header.split(",").index("Device")

    def row(latency: str, device: str = good[i_device]) -> str:
        cells = list(good)
        cells[i_latency], cells[i_device] = latency, device
        return ",".join(cells)

    lines = [header, first, row("nan"), row("-1.0"), row("0"), row("inf"), row(""), first[: len(first) // 2],
             row("0.5", "NVIDIA H100 80GB HBM3"), row("0.5", "NVIDIA L4")]
    folder = tmp_path / "neusight" / "kernels" / "train" / "linear"
    folder.mkdir(parents=True)
    (folder / "Tesla_T4.csv").write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match=r"6 row\(s\) without a usable latency"):
        table = load_kernels("train", ops=["linear"], data_dir=tmp_path)
    assert len(table) == 1 and list(table.gpu) == ["t4"] and table.latency_ms[0] == float(good[i_latency])
