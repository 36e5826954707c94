"""scripts/bench_llm.py: what a run writes, and its fold bookkeeping (no data, no checkpoints)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench_llm():
    spec = importlib.util.spec_from_file_location("_test_bench_llm", REPO / "scripts" / "bench_llm.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


class _Payload:
    def to_json(self):
        return {"fitted": True}


def _fake_run(monkeypatch, bench_llm, tmp_path):
    """main() with the benchmark itself stubbed and the shipped files pointed into tmp_path."""
    import lilou.api

    result = {"leave_one_gpu_out": {"overall": {}, "overall_engine_seen": {}, "per_gpu": {}, "per_source": {},
                                    "kendall_tau_gpu_ranking": {}, "kendall_tau_gpu_bound_groups": {}},
              "held_back_independent": {"overall": {}}}
    monkeypatch.setattr(bench_llm, "run_bench", lambda *a, **k: (result, _Payload(), _Payload()))
    monkeypatch.setattr(lilou.api, "Predictor", lambda **k: None)
    calibration, attention = tmp_path / "calibration.json", tmp_path / "attention.json"
    monkeypatch.setattr(bench_llm, "CALIBRATION", calibration)
    monkeypatch.setattr(bench_llm, "ATTENTION", attention)
    return calibration, attention


@pytest.mark.parametrize("extra", [[], ["--out", "figures.json"]])
def test_a_benchmark_run_leaves_the_shipped_files_alone(bench_llm, monkeypatch, tmp_path, extra) -> None:
    calibration, attention = _fake_run(monkeypatch, bench_llm, tmp_path)
    out = tmp_path / "llm.json"
    monkeypatch.setattr(bench_llm, "OUT", out)
    extra = [str(tmp_path / e) if e.endswith(".json") else e for e in extra]
    assert bench_llm.main(["--quick", *extra]) == 0
    assert not calibration.exists() and not attention.exists()
    assert (Path(extra[1]) if extra else out).exists()


def test_write_shipped_refits_the_package_files(bench_llm, monkeypatch, tmp_path) -> None:
    calibration, attention = _fake_run(monkeypatch, bench_llm, tmp_path)
    assert bench_llm.main(["--quick", "--out", str(tmp_path / "llm.json"), "--write-shipped"]) == 0
    assert json.loads(calibration.read_text()) == json.loads(attention.read_text()) == {"fitted": True}
