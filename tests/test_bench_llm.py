"""scripts/bench_llm.py: what a run writes, and its fold bookkeeping (no data, no checkpoints)."""
from __future__ import annotations

import math
import json
import sys
from pathlib import Path

import pytest
from tests.conftest import load_script


@pytest.fixture(scope="module")
def bench_llm():
    module = load_script("bench_llm", register=True)
    yield module
    sys.modules.pop(module.__name__, None)


class _Payload:
    def to_json(self):
        return {"fitted": True}


def _fake_run(monkeypatch, bench_llm, tmp_path):
    """main() with the benchmark itself stubbed and the shipped files pointed into tmp_path."""
    import lilou.api

    result = {"leave_one_gpu_out": {"overall": {}, "overall_engine_seen": {}, "per_gpu": {}, "per_source": {},
                                    "kendall_tau_gpu_ranking": {}, "kendall_tau_gpu_bound_groups": {}},
              "held_back_independent": {"overall": {}, "fitted_on_gpus": [], "copy_baseline": {},
                                        "interval_coverage": {}},
              "interval_coverage_logo_out_of_fold": {"pooled": {}, "pooled_engine_seen": {}}}
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


def _run(gpu, itl=None, e2e=None, held_back=None, **fields):
    from types import SimpleNamespace

    base = dict(source="llm_inference_bench", task="t", model="m", engine="vllm", tp=1, batch=8.0, input_len=128,
                output_len=128.0, dtype="bf16", config="", itl_ms=itl, ttft_ms=None, e2e_ms=e2e, power_w=None,
                itl_kind="derived-static" if itl else None, steady=False,
                held_back=gpu.startswith("h100") if held_back is None else held_back)
    return SimpleNamespace(gpu=gpu, **{**base, **fields})


def _row(run):
    from types import SimpleNamespace

    return SimpleNamespace(run=run, model=run.model)


def test_the_held_back_check_fits_on_no_twin_of_the_held_back_gpu(bench_llm) -> None:
    rows = [_row(_run(g, itl=1.0)) for g in ("a40", "gh200", "b200", "h100-sxm")]
    fit_rows, held = bench_llm.held_back_split(rows)
    assert [r.run.gpu for r in fit_rows] == ["a40", "b200"] and [r.run.gpu for r in held] == ["h100-sxm"]


def test_the_copy_baseline_predicts_the_h100_by_its_twin(bench_llm) -> None:
    h100 = _run("h100-sxm", e2e=100.0)
    runs = [h100, _run("gh200", e2e=95.0), _run("a100-sxm4-40gb", e2e=200.0),
            _run("h100-sxm", e2e=50.0, batch=16.0), _run("gh200", e2e=60.0, batch=16.0, model="other")]
    out = bench_llm.copy_baseline(runs, [(_row(h100), {"e2e_ms": 90.0}, {})])
    assert out["e2e_ms"]["copy_all_pairs"] == {"n": 1, "median_ape": 5.0, "mean_ape": 5.0, "median_log_ratio": -0.051}
    assert out["e2e_ms"]["lilou_same_runs"]["median_ape"] == 10.0
    assert out["e2e_ms"]["pairs"] == {"gh200 for h100-sxm": 1}


def test_a_fold_is_scored_per_engine_version_with_its_bias(bench_llm) -> None:
    """Synthetic rows (not measurements) shaped like the A100 fold: HF rows that scatter (+-5 %) beside vLLM 0.5.4
    server rows all predicted at 0.42x (borrowed constants): per (fold, engine), the first have APE 5 and bias 0,
    the second APE 58 and bias log 0.42 (the fold's pooled median APE, 31.5, is neither)."""
    hf = [(_row(_run("a100-sxm4-40gb", itl=10.0, source="mlenergy_v1_2023", engine="hf")), {"itl_ms": p}, {})
          for p in (10.5, 9.5, 10.0)]
    v2 = [(_row(_run("a100-sxm4-40gb", itl=10.0, source="mlenergy_v2_2024")), {"itl_ms": 4.2}, {}) for _ in range(3)]
    groups = bench_llm.by_fold_engine(hf + v2, lambda r: r.run.gpu)
    assert sorted(groups) == [("a100-sxm4-40gb", "hf"), ("a100-sxm4-40gb", "vllm-0.5.4-server")]
    assert bench_llm.score(groups[("a100-sxm4-40gb", "hf")])["itl_ms"]["lilou"] == {
        "n": 3, "median_ape": 5.0, "mean_ape": 3.33, "median_log_ratio": 0.0}
    assert bench_llm.score(groups[("a100-sxm4-40gb", "vllm-0.5.4-server")])["itl_ms"]["lilou"] == {
        "n": 3, "median_ape": 58.0, "mean_ape": 58.0, "median_log_ratio": -0.868}   # log 0.42


def test_leave_one_gpu_out_coverage_is_out_of_fold(bench_llm) -> None:
    """Half-widths from the other folds' residuals: a fold whose errors are 10x every other fold's is not covered,
    though the pooled in-sample quantile (fitted on its residuals too) covers most of it."""
    import math

    scored = []
    for gpu, error in (("a40", 1.05), ("b200", 1.06), ("v100-sxm2-32gb", 1.04), ("gh200", 1.5)):
        for i in range(30):
            r = _row(_run(gpu, itl=10.0))
            scored.append((r, {"itl_ms": 10.0 * error ** (1 + i / 30)}, {}))
    out = bench_llm.coverage_out_of_fold(scored, lambda r: r.run.gpu)
    assert out["per_fold"]["gh200"]["itl_ms"]["coverage"] == 0.0
    assert out["pooled"]["itl_ms"]["n"] == 120
    in_sample = bench_llm.coverage(scored, bench_llm.conformal(scored, lambda r: r.run.gpu))["itl_ms"]["coverage"]
    assert in_sample >= 0.85 > out["pooled"]["itl_ms"]["coverage"]
    assert not math.isnan(out["pooled"]["itl_ms"]["coverage"])


def test_serving_folds_price_their_rows_with_their_own_attention_correction(bench_llm, monkeypatch) -> None:
    """The attention correction of a fold is fitted without the AIConfigurator GPUs on the held-out GPU's die."""
    import numpy as np

    import lilou.llm.attention as attention

    gpus = ["a100-sxm4-80gb", "b200", "gb200", "h200", "l40s"]
    data = {(g, phase): (np.full(3, i + 1, dtype=float), np.zeros((3, 1)), np.ones(3))
            for i, g in enumerate(gpus) for phase in ("prefill", "decode")}
    monkeypatch.setattr(bench_llm, "attention_rows", lambda predictor: data)

    class Fitted:
        def __init__(self, work):
            self.gpus = sorted(gpus[int(i) - 1] for i in set(work))

        def apply(self, work, features):
            return work

        def to_json(self):
            return self.gpus

    monkeypatch.setattr(attention, "fit_phase", lambda work, f, measured: Fitted(work))
    report, shipped, without = bench_llm.attention_fit(None)
    assert shipped.decode.gpus == gpus
    assert without({"GB100"}).decode.gpus == ["a100-sxm4-80gb", "h200", "l40s"]
    assert without({"GA100"}).prefill.gpus == ["b200", "gb200", "h200", "l40s"]

    # leave_one_out hands each fold the rows its reprice gives
    rows = [_row(_run(g, itl=1.0, e2e=None)) for g in ("a40", "b200")]
    seen = []
    monkeypatch.setattr(bench_llm, "fit", lambda train: {})
    monkeypatch.setattr(bench_llm, "predictions", lambda r, consts: {})
    monkeypatch.setattr(bench_llm, "baselines", lambda r, consts: {})

    def reprice(held, rows):
        seen.append(held)
        return rows

    bench_llm.leave_one_out(rows, key=lambda r: r.run.gpu, reprice=reprice)
    assert seen == ["a40", "b200"]


_SCATTER = [-0.04, -0.03, -0.02, -0.01, 0.0, 0.0, 0.01, 0.02, 0.03, 0.04]   # median 0


def _residuals():
    """Synthetic leave-one-GPU-out residuals (not measurements): vLLM on GPUs a (bias +0.1) and b (-0.3), ten rows
    each; HF on GPU c only (bias +0.5), twenty rows with twice the scatter."""
    return ([("a", "vllm", 0.1 + e) for e in _SCATTER] + [("b", "vllm", -0.3 + e) for e in _SCATTER]
            + [("c", "hf", 0.5 + 2 * e) for e in _SCATTER * 2])


def test_half_widths_add_the_between_gpu_bias_spread_to_the_within_gpu_quantile(bench_llm) -> None:
    """within = the conformal 90 % quantile of |r - its GPU's median| (rank ceil(0.9 (n + 1))); spread = root mean
    square of the GPU medians (vLLM's: sqrt((0.1^2 + 0.3^2) / 2) = 0.2236); HF, measured on one GPU only, and the
    pooled half-width take the spread of the engines measured on two GPUs or more."""
    import math

    spread = math.sqrt((0.1 ** 2 + 0.3 ** 2) / 2)
    out = bench_llm.gpu_shift_half_widths(_residuals())
    assert out["vllm"] == round(0.04 + 1.6449 * spread, 4) == 0.4078       # rank 19 of 20 |e|: 0.04
    assert out["hf"] == round(0.08 + 1.6449 * spread, 4) == 0.4478         # rank 19 of 20 |2e|: 0.08
    assert out["all"] == 0.4478                                            # rank 37 of 40: 0.08
    assert out["vllm"] > bench_llm._half_width([abs(r) for _, e, r in _residuals() if e == "vllm"], 0.1) == 0.33


def test_ttft_half_width_is_never_narrower_than_the_pooled_itl_one(bench_llm) -> None:
    records = [{"fold": f, "engine": e, "itl_ms": r} for f, e, r in _residuals()]
    records += [{"fold": f, "engine": "vllm", "ttft_ms": 0.01 * s} for f in ("a", "b") for s in (-1, 0, 1)]
    out = bench_llm.half_widths(records)
    assert out["itl_ms"]["all"] == 0.4478 and out["ttft_ms"] == {"all": 0.4478}


def test_new_gpu_with_a_shifted_bias_is_covered_out_of_fold(bench_llm) -> None:
    """Four GPUs whose residuals are shifted by +0.1, -0.1, +0.05 and -0.15 with a small scatter: out of fold, the
    pooled 90 % quantile of |r| of the three others (0.13) covers 9 of the 30 rows of the -0.15 GPU; the within
    quantile + 1.645 x the bias spread (0.04 + 1.6449 x 0.0866 = 0.1825) covers 27 (all but |r| 0.19)."""
    scored = []
    for gpu, bias in (("a40", 0.1), ("b200", -0.1), ("v100-sxm2-32gb", 0.05), ("gh200", -0.15)):
        for e in _SCATTER * 3:
            r = _row(_run(gpu, itl=10.0))
            scored.append((r, {"itl_ms": 10.0 * math.exp(bias + e)}, {}))
    others = [x for x in scored if x[0].run.gpu != "gh200"]
    old = bench_llm._half_width([abs(math.log(p["itl_ms"] / 10.0)) for _, p, _ in others], 0.1)
    new = bench_llm.conformal(others, lambda r: r.run.gpu)["itl_ms"]["all"]
    assert (old, new) == (0.13, round(0.04 + 1.6449 * math.sqrt((0.1 ** 2 + 0.1 ** 2 + 0.05 ** 2) / 3), 4))
    gh200 = [abs(-0.15 + e) for e in _SCATTER * 3]
    assert sum(v <= old + 1e-9 for v in gh200) == 9 and sum(v <= new for v in gh200) == 27
    out = bench_llm.coverage_out_of_fold(scored, lambda r: r.run.gpu)
    assert out["per_fold"]["gh200"]["itl_ms"] == {"n": 30, "coverage": 0.9}


def test_intervals_from_rewrites_only_the_half_widths(bench_llm, tmp_path) -> None:
    path = tmp_path / "calibration.json"
    before = {"itl_scale": {"vllm": 1.0}, "power": {"idle": 0.12}, "intervals": {"itl_ms": {"all": 9.0}},
              "fitted_on": "824 runs; intervals: the old way"}
    path.write_text(json.dumps(before, indent=2) + "\n")
    records = [{"fold": f, "engine": e, "itl_ms": r, "power_w": r} for f, e, r in _residuals()]
    bench = tmp_path / "llm.json"
    bench.write_text(json.dumps({"logo_log_residuals": records}))
    import pytest as _pytest

    with _pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench_llm, "CALIBRATION", path)
        assert bench_llm.main(["--intervals-from", str(bench)]) == 0
    after = json.loads(path.read_text())
    assert {k: v for k, v in after.items() if k not in ("intervals", "fitted_on")} == \
        {k: v for k, v in before.items() if k not in ("intervals", "fitted_on")}
    assert after["intervals"]["itl_ms"] == {"all": 0.4478, "vllm": 0.4078, "hf": 0.4478}
    assert after["fitted_on"].startswith("824 runs; intervals: 90 % half-widths")
