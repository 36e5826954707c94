"""Every benchmark and ablation JSON names the commit and date of its run, and the report prints it per section;
benchmarks given --out write there alone (review defect 7, nit 9)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[1]


def _script(name: str):
    return load_script(name)


def _result():
    from lilou.latency.evaluation.e2e_results import EvalResult, EvalRow

    rows = [EvalRow(gpu=g, model="m", seq=8, batch=1, measured_ms=100.0, fold=g, kernels=3,
                    predicted_ms={"model": p, "roofline": 120.0}) for g, p in (("a", 110.0), ("b", 95.0), ("c", 100.0))]
    return EvalResult(mode="leave-one-GPU-out", fusion="predicted", rows=rows, folds={})


def test_bench_e2e_writes_under_out_with_its_commit_and_passes_its_cache_folders(tmp_path, monkeypatch):
    module = _script("bench_e2e")
    seen = {}

    def evaluate(**kwargs):
        seen.update(kwargs)
        return _result()

    monkeypatch.setattr(module, "evaluate", evaluate)
    monkeypatch.setattr(module, "print_tables", lambda result: None)
    assert module.main(["--out", str(tmp_path / "bench"), "--cache-dir", str(tmp_path / "logo"),
                        "--models-dir", str(tmp_path / "models")]) == 0
    assert seen["cache_dir"] == tmp_path / "logo" and seen["models_dir"] == tmp_path / "models"
    data = json.loads((tmp_path / "bench" / "e2e.json").read_text())
    assert (tmp_path / "bench" / "e2e.csv").exists()
    assert len(data["provenance"]["commit"]) >= 7 and data["provenance"]["commit_date"][:2] == "20"
    assert data["overall"]["model_mean_gpu_mape"] == round((10 + 5 + 0) / 3, 2)


def test_bench_intervals_records_its_commit(tmp_path):
    module = _script("bench_intervals")
    module.report_speed({"kernel_summary": []}, tmp_path / "intervals.json", 0.0)
    provenance = json.loads((tmp_path / "intervals.json").read_text())["provenance"]
    assert provenance["commit"] and provenance["run_at"].endswith("UTC")


def test_report_names_each_sections_commit_and_date(tmp_path, monkeypatch):
    from lilou.research.ablation import write_result

    results = tmp_path / "results"
    write_result("ablate_e2e", [{"fusion": "oracle", "model_mape": 7.17}], ["fusion", "model_mape"], title="t",
                 seed=0, quick=False, data="d", started=0.0, out_dir=results)
    meta = json.loads((results / "ablate_e2e.json").read_text())
    report = _script("make_report")
    monkeypatch.setattr(report, "RESULTS", results)
    lines = report.section("ablate_e2e", {"ok": True})
    (run,) = [line for line in lines if line.startswith("Run: ")]
    assert f"commit {meta['provenance']['commit']} ({meta['provenance']['commit_date'][:10]})" in run
    # an old output without provenance says so instead of borrowing the report's commit
    del meta["provenance"]
    (results / "ablate_e2e.json").write_text(json.dumps(meta))
    (run,) = [line for line in report.section("ablate_e2e", {"ok": True}) if line.startswith("Run: ")]
    assert "not recorded" in run
    bench = tmp_path / "repo" / "outputs" / "bench"
    bench.mkdir(parents=True)
    (bench / "e2e.json").write_text(json.dumps({**_result().to_json(), "provenance": {
        "commit": "abc1234", "commit_date": "2026-12-07T04:00:00+00:00", "dirty": False, "run_at": "2026-12-07 04:30 UTC"}}))
    (bench / "intervals.json").write_text(json.dumps({"kernel_summary": []}))
    monkeypatch.setattr(report, "REPO", tmp_path / "repo")
    text = "\n".join(report.bench_section())
    assert "- `e2e`: commit abc1234 (2026-12-07), run 2026-12-07 04:30 UTC" in text
    assert "- `intervals`: commit and date of the run not recorded" in text


def test_plot_resources_caches_exports_under_out(tmp_path, monkeypatch):
    module = _script("plot_resources")
    caches = []

    class Stop(Exception):
        pass

    def export(name, batch, seq, cache):
        caches.append(cache)
        raise Stop

    monkeypatch.setattr(module, "export", export)
    with pytest.raises(Stop):
        module.main(["--models", "resnet50", "--out", str(tmp_path / "out")])
    assert caches == [tmp_path / "out" / "models"]


def test_every_benchmark_records_its_commit_and_the_summary_finds_it(tmp_path):
    """fusion.json and graph.json are lists: their provenance goes in a side file, which the summary reads too."""
    from lilou.research.ablation import write_provenance

    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "fusion.json").write_text("[]")
    side = write_provenance(bench / "fusion.json")
    assert side.name == "fusion.provenance.json"
    (bench / "graph.json").write_text("[]")  # an older run: nothing recorded
    found = _script("bench_summary").provenance(bench)
    assert found["fusion"]["commit"] and found["graph"] is None
    assert set(found) == {"fusion", "graph"}
    # Each benchmark script writes one (bench_llm and bench_kernel_table are maintained apart).
    for name in ("bench_data", "bench_graph", "bench_kernels", "bench_fusion", "bench_speed", "bench_conv_geometry",
                 "bench_serve"):
        assert "write_provenance(" in (REPO / "scripts" / f"{name}.py").read_text(), name
