"""A bounded slice of the fuzzer (scripts/fuzz.py, issue #17 item 4): a fixed seed, about 40 s of cases
on 2 cores. `make fuzz` runs the long version."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_fuzz_slice_has_no_traceback_hang_or_memory_failure(tmp_path):
    out = tmp_path / "fuzz"
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "fuzz.py"), "--seconds", "40", "--seed", "0",
                             "--workers", "2", "--out", str(out)], capture_output=True, text=True, timeout=150)
    summary = json.loads((out / "summary.json").read_text())
    counts = summary["counts"]
    bad = [(f["verdict"], f["index"], f["argv"], f["stderr"][-300:]) for f in summary["failures"]
           if f["verdict"] in ("traceback", "hang", "memory", "crash")]
    assert not bad, bad
    assert counts["traceback"] == counts["hang"] == counts["memory"] == counts["crash"] == 0
    assert result.returncode == 0, result.stderr[-2000:]
    assert summary["cases"] >= 100, summary  # the slice did run cases, of every kind
    assert set(summary["by_kind"]) == {"structure", "coherent", "bytes", "fields", "llm-config"}
    assert summary["by_kind"]["llm-config"]["internal"] == 0  # hostile config.json files are bad input, exit 2
    assert counts["ok"] > 0 and counts["input"] > 0
    assert summary["peak_rss_mb"] < 1024


def test_fuzz_cases_are_reproducible():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import fuzz
    finally:
        sys.path.remove(str(REPO / "scripts"))
    seeds = [(p.read_bytes(), fuzz.onnx.load(str(p), load_external_data=False)) for p in fuzz.seed_files([], REPO)]
    first = [fuzz.make_case(7, i, seeds) for i in range(30)]
    assert first == [fuzz.make_case(7, i, seeds) for i in range(30)]
    assert len({data for _, data, _ in first}) > 25


def test_attribute_of_the_wrong_type_is_not_an_internal_error(tmp_path, capsys):
    """Found by the fuzzer: a stray float `kernel_shape` on a Reshape crashed the fusion features (exit 1)."""
    from onnx import helper

    from lilou.cli import main
    from tests.onnx_builders import ints, make_model, tensor

    nodes = [helper.make_node("Reshape", ["x", "s"], ["h"], name="r", kernel_shape=1.5),
             helper.make_node("Relu", ["h"], ["y"], name="relu")]
    model = make_model(nodes, [tensor("x", [2, 8])], [tensor("y", None)], [ints("s", [4, -1])])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    for command in (["fuse"], ["infer", "--gpu", "a10g"]):
        status = main([command[0], str(path), *command[1:], "--format", "json"])
        err = capsys.readouterr().err
        assert status in (0, 2), err
        assert "internal error" not in err
