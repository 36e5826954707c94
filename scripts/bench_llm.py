"""`make bench-llm`: LLM serving predictions against real measurements (docs/llm.md).

Sources: ``$LILOU_DATA_DIR/llm_energy`` (ML.ENERGY v1/v2/v3, Argonne LLM-Inference-Bench; read by
:mod:`lilou.data.llm_energy`, which says what each column measured) and the attention rows of AIConfigurator in
the kernel table. Rows on H100 and L4 are held back: they never enter a fit and are scored separately, as the
held-back check, with constants fitted on every other GPU except the H100's twins (below).

First, the attention correction (lilou.llm.attention): fitted on AIConfigurator's vLLM attention kernels,
leave-one-GPU-out over its GPUs for the report (each held out with its twins), then on all of them for
``lilou/llm/attention.json``.

What is fitted for serving (always inside the fold, without the held-out GPU or LLM):
- per engine (``vllm``, ``hf``, and ML.ENERGY v2's ``vllm-0.5.4-server``, whose host side differs): the TTFT scale
  (median ratio), the decode step's per-step and per-sequence host terms, and for HF eager its GPU-time scale and
  host time per launch (vLLM's GPU time is the kernel model's, unscaled);
- the power model's three coefficients (lilou.llm.power, least squares on relative error);
- the load-scaled TDP baseline's two coefficients;
- the attention correction, in each leave-one-GPU-out fold, on the AIConfigurator GPUs off the held-out GPU's die
  (lilou/hardware/dies.yaml: the A100-SXM4-80GB is out of the A100-SXM4-40GB fold, B200 and GB200 out of the B200
  fold, the H200 out of the GH200 fold); the leave-one-LLM-out folds use the one fitted on every GPU.
The roofline ITL baseline has no constant. The kernel model itself is the Predictor's, not refitted per fold.
A fold holds out a GPU with its twins (the serving GPUs on its die). The held-back H100 check is fitted without the
H100's twins too: the GH200 (the GH100 die, a serving GPU) is out of its serving constants, the H200 out of its
attention correction, and its interval half-widths come from the other dies' fold residuals; the copy baseline
(the GH200's measurement of the same configuration as the H100 prediction) is scored beside it.

Outputs: ``outputs/bench/llm.json`` (every figure; ``--out`` elsewhere). A benchmark run writes nothing else.
With ``--write-shipped`` (``make calibrate-llm``) it also refits the shipped package files
``lilou/llm/calibration.json`` (the constants fitted on every non-held-back row, and the conformal 90 % half-widths
of log(predicted / measured) from the leave-one-GPU-out residuals) and ``lilou/llm/attention.json``.

    python scripts/bench_llm.py [--quick] [--no-attention] [--out FILE] [--write-shipped]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lilou.errors import exit_on_input_error

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "outputs" / "bench" / "llm.json"
CALIBRATION = ROOT / "lilou" / "llm" / "calibration.json"
ATTENTION = ROOT / "lilou" / "llm" / "attention.json"
#: ML.ENERGY names -> the built-in config with the same architecture (FP8 checkpoints, Thinking/Coder twins).
SAME_ARCHITECTURE = {
    "Qwen/Qwen3-235B-A22B-Thinking-2507": "Qwen/Qwen3-235B-A22B-Instruct-2507",
    "Qwen/Qwen3-30B-A3B-Thinking-2507": "Qwen/Qwen3-30B-A3B-Instruct-2507",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": "Qwen/Qwen3-30B-A3B-Instruct-2507",
}
ARGONNE_IDLE_S = 2.0   # 1 s of sleep before and after the batch inside the power window


@dataclass
class Row:
    """One measured run with its raw prediction (engine scales 1, power from utilisations)."""

    run: object
    model: str              # canonical built-in name
    tdp: float
    itl_raw: float
    ttft_raw: float
    prefill: object
    decode: object
    steady: object          # vLLM: the steady-state step with the arriving prompts chunked in (or None)
    itl_roof: float
    ttft_roof: float


def canonical(name: str) -> str:
    name = name[:-4] if name.endswith("-FP8") else name
    return SAME_ARCHITECTURE.get(name, name)


def predict_rows(runs, llm) -> tuple[list[Row], Counter]:
    from lilou.errors import LilouInputError
    from lilou.hardware import resolve_device

    rows, skipped, cache = [], Counter(), {}
    for run in runs:
        batch = max(1, round(run.batch))
        out = max(2, round(run.output_len))
        key = (canonical(run.model), run.gpu, run.tp, batch, run.input_len, out, run.dtype, run.engine)
        if key not in cache:
            try:
                cache[key] = llm.predict(key[0], run.gpu, tp=run.tp, batch=batch, input_len=run.input_len,
                                         output_len=out, dtype=run.dtype,
                                         engine="hf" if run.engine == "hf" else "vllm")
            except LilouInputError as error:
                cache[key] = str(error)
        result = cache[key]
        if isinstance(result, str):
            skipped["no built-in config" if "unknown LLM" in result else
                    "layers not modelled" if "models transformer" in result else result[:80]] += 1
            continue
        if result.prefill is None:
            skipped["does not fit in memory (the engine would queue or preempt)"] += 1
            continue
        rows.append(Row(run=run, model=result.model, tdp=resolve_device(run.gpu).board_power_w,
                        itl_raw=result.decode.ms, ttft_raw=result.prefill.ms, prefill=result.prefill,
                        decode=result.decode, steady=result.steady, itl_roof=result.decode.roofline_ms,
                        ttft_roof=result.prefill.roofline_ms))
    return rows, skipped


# ------------------------------------------------------------------------------- predictions of a row


#: Engine versions whose host side the data tells apart: ML.ENERGY v2's vLLM 0.5.4 OpenAI server spends far more
#: host time per running sequence than vLLM 0.11 (v3) or offline vLLM (Argonne). Its constants are fitted on its
#: own rows; a fold without them (the A100 fold: v2's only non-held-back GPU) falls back to the "vllm" constants.
VLLM_054 = "vllm-0.5.4-server"
ENGINE_KEYS = ("vllm", "hf", VLLM_054)


def _engine(row: Row) -> str:
    if row.run.engine == "hf":
        return "hf"
    return VLLM_054 if row.run.source == "mlenergy_v2_2024" else "vllm"


def _constants(consts, key: str, row: Row, default):
    engine = _engine(row)
    table = consts[key]
    return table.get(engine, table.get("hf" if engine == "hf" else "vllm", default))


def times(row: Row, consts) -> tuple[float, float]:
    """(TTFT, step): the step is the decode step, or for a chunked-prefill server the steady-state mixed step."""
    s, c0, c1, gap = _constants(consts, "itl", row, (1.0, 0.0, 0.0, None))
    return _constants(consts, "ttft", row, 1.0) * row.ttft_raw, decode_step(row, s, gap) + c0 + c1 * row.run.batch


def chunked(row: Row) -> bool:
    """A modern vLLM server in steady state: the arriving prompts are chunked into the decode steps (vLLM 0.5.4's
    server ran them as separate prefill steps, and a static batch has none)."""
    return row.run.steady and row.steady is not None and _engine(row) == "vllm"


def step_gpu_ms(row: Row) -> float:
    return row.steady.gpu_ms if chunked(row) else row.decode.gpu_ms


def decode_step(row: Row, scale: float, gap: float | None) -> float:
    """The decode step's kernels: back to back (CUDA graphs, ``gap`` None) or through the launch queue with the
    host's time per kernel ``gap`` (HF eager), GPU times scaled."""
    from lilou.latency.composition.overhead import queue_total

    if gap is None or not row.decode.queue:
        return scale * step_gpu_ms(row)
    return float(np.mean([queue_total(envelope, gap, scale) for envelope in row.decode.queue]))


def itl_like(row: Row, ttft: float, itl: float) -> float:
    """The prediction comparable with the row's ITL label (see docs/llm.md)."""
    kind, out = row.run.itl_kind, row.run.output_len
    if chunked(row):                                   # the step already carries its share of the prompts
        return itl
    if kind in ("engine-mean", "steady-derived"):      # steady state: arriving prefills share the steps
        return itl + ttft / out
    if kind == "per-token-incl-prefill":               # request latency / output tokens at batch 1
        return (ttft + (out - 1) * itl) / out
    return itl                                          # derived-static


def parts(row: Row, ttft: float, itl: float):
    out = row.run.output_len
    if chunked(row):
        return [(row.steady, 1.0, itl)]
    if row.run.steady:
        return [(row.prefill, 1 / out, ttft), (row.decode, 1.0, itl)]
    return [(row.prefill, 1, ttft), (row.decode, out - 1, itl)]


def power(row: Row, consts) -> float:
    from lilou.llm.predictor import utilisation

    ttft, itl = times(row, consts)
    u_mem, u_compute = utilisation(parts(row, ttft, itl))
    model = consts["power"]
    watts = model.power_w(row.tdp, u_mem, u_compute)
    if row.run.power_window == "batch+2s-idle":
        run_ms = ttft + (row.run.output_len - 1) * itl
        idle_ms = 1000 * ARGONNE_IDLE_S
        watts = (watts * run_ms + model.idle * row.tdp * idle_ms) / (run_ms + idle_ms)
    return watts


def predictions(row: Row, consts) -> dict[str, float]:
    ttft, itl = times(row, consts)
    out: dict[str, float] = {}
    run = row.run
    if run.itl_ms:
        out["itl_ms"] = itl_like(row, ttft, itl)
        out["gpu_share"] = _constants(consts, "itl", row, (1.0,))[0] * step_gpu_ms(row) / itl
    if run.ttft_ms:
        out["ttft_ms"] = ttft
    if run.e2e_ms and run.itl_kind is None and run.power_w is None:
        out["e2e_ms"] = ttft + (run.output_len - 1) * itl
    if run.power_w:
        out["power_w"] = power(row, consts)
    return out


def baselines(row: Row, consts) -> dict[str, float]:
    """WattGPU's two physical baselines: roofline ITL (and TTFT, e2e), load-scaled TDP power."""
    out: dict[str, float] = {}
    run = row.run
    if run.itl_ms:
        out["itl_ms"] = row.steady.roofline_ms if chunked(row) else itl_like(row, row.ttft_roof, row.itl_roof)
    if run.ttft_ms:
        out["ttft_ms"] = row.ttft_roof
    if run.e2e_ms and run.itl_kind is None and run.power_w is None:
        out["e2e_ms"] = row.ttft_roof + (run.output_len - 1) * row.itl_roof
    if run.power_w:
        a, b = consts["tdp_load"]
        out["power_w"] = row.tdp * float(np.clip(a + b * math.log2(max(run.batch, 1.0)), 0.05, 1.0))
    return out


def labels(row: Row) -> dict[str, float]:
    run = row.run
    out = {}
    if run.itl_ms:
        out["itl_ms"] = run.itl_ms
    if run.ttft_ms:
        out["ttft_ms"] = run.ttft_ms
    if run.e2e_ms and run.itl_kind is None and run.power_w is None:
        out["e2e_ms"] = run.e2e_ms
    if run.power_w:
        out["power_w"] = run.power_w
    return out


# ------------------------------------------------------------------------------------------ fitting


def fit(rows: list[Row]) -> dict:
    """Every fitted constant, from ``rows`` only."""
    from scipy.optimize import least_squares

    from lilou.llm.power import PowerModel

    consts = {"ttft": {}, "itl": {}, "power": PowerModel(), "tdp_load": (0.6, 0.0)}
    for engine in ENGINE_KEYS:
        mine = [r for r in rows if _engine(r) == engine]
        ttft = [r.run.ttft_ms / r.ttft_raw for r in mine if r.run.ttft_ms]
        if ttft or engine != VLLM_054:
            consts["ttft"][engine] = float(np.median(ttft)) if ttft else 1.0
    for engine in ENGINE_KEYS:
        mine = [r for r in rows if _engine(r) == engine]
        # a per-sequence term needs more than one batch size to be told apart from the per-step one
        per_seq = 1.0 if len({round(r.run.batch) for r in mine}) > 1 else 1e-9
        terms = [term for term in (_itl_terms(r, consts) for r in mine) if term is not None]
        if terms:
            consts["itl"][engine] = (_fit_queue(terms, per_seq) if engine == "hf" else _fit_linear(terms, per_seq))
        elif engine != VLLM_054:
            consts["itl"][engine] = (1.0, 0.0, 0.0, None)
    powered = [r for r in rows if r.run.power_w]
    if len(powered) >= 3:
        def residual(x):
            trial = dict(consts, power=PowerModel(idle=x[0], memory=x[1], compute=x[2]))
            return [(power(r, trial) - r.run.power_w) / r.run.power_w for r in powered]

        solved = least_squares(residual, x0=[0.2, 0.4, 0.4], bounds=([0.05, 0.0, 0.0], [0.6, 2.0, 2.0]))
        consts["power"] = PowerModel(*(float(v) for v in solved.x))

        def tdp_residual(x):
            return [(r.tdp * np.clip(x[0] + x[1] * math.log2(max(r.run.batch, 1.0)), 0.05, 1.0) - r.run.power_w)
                    / r.run.power_w for r in powered]

        consts["tdp_load"] = tuple(float(v) for v in least_squares(tdp_residual, x0=[0.5, 0.05]).x)
    return consts


def _itl_terms(r: Row, consts):
    """(row, base, slope, label) with label ~ base + slope x decode step, or None for a row without a time label."""
    ttft = _constants(consts, "ttft", r, 1.0) * r.ttft_raw
    run = r.run
    if run.itl_ms:
        base = itl_like(r, ttft, 0.0)
        return r, base, itl_like(r, ttft, 1.0) - base, run.itl_ms
    if run.e2e_ms and run.power_w is None:
        return r, ttft, run.output_len - 1, run.e2e_ms
    return None


def _fit_linear(terms, per_seq: float) -> tuple[float, float, float, None]:
    """vLLM (CUDA graphs): label = base + slope (GPU time + c0 + c1 x batch), least squares on relative error.
    The GPU time is the kernel model's, not scaled: a fitted scale (bounded 0.8-5, before session 13) traded off
    against the per-sequence term on the few engine rows of a fold and was worse on every GPU fold (docs/llm.md)."""
    from scipy.optimize import lsq_linear

    design = [[slope / label, slope * r.run.batch / label] for r, base, slope, label in terms]
    target = [1.0 - (base + slope * step_gpu_ms(r)) / label for r, base, slope, label in terms]
    solved = lsq_linear(np.asarray(design), np.asarray(target), bounds=([0.0, 0.0], [50.0, per_seq]),
                        method="bvls")
    return (1.0, *(float(v) for v in solved.x), None)


#: Host time per kernel launch searched for HF eager (ms): 0 to 80 us; GPU-time scales 0.8 to 2.
QUEUE_GAPS = np.arange(0.0, 0.0805, 0.001)
QUEUE_SCALES = np.arange(0.8, 2.001, 0.025)


def _fit_queue(terms, per_seq: float) -> tuple[float, float, float, float]:
    """HF eager: label = base + slope (queue(gap, s) + c0 + c1 x batch). A grid over (gap, s), the host terms by
    bounded least squares at each point; the point of least squared relative error."""
    from scipy.optimize import lsq_linear

    rows = [r for r, *_ in terms]
    base, slope, label = (np.array([t[i] for t in terms], dtype=np.float64) for i in (1, 2, 3))
    batch = np.array([r.run.batch for r in rows], dtype=np.float64)
    # queue(g, s) = mean over a row's decode points of the max over its envelope's vertices of (issued g + gpu s)
    envelopes = [e for r in rows for e in r.decode.queue]
    points = np.array([len(r.decode.queue) for r in rows])
    issued = np.concatenate([e[:, 0] for e in envelopes])
    gpu = np.concatenate([e[:, 1] for e in envelopes])
    starts = np.cumsum([0] + [len(e) for e in envelopes])[:-1]
    owner = np.repeat(np.arange(len(rows)), points)
    design = np.column_stack([slope / label, slope * batch / label])
    best = (np.inf, None)
    for gap in QUEUE_GAPS:
        for scale in QUEUE_SCALES:
            queue = np.bincount(owner, np.maximum.reduceat(issued * gap + gpu * scale, starts)) / points
            target = 1.0 - (base + slope * queue) / label
            if per_seq < 1.0:  # one batch size: the per-step term alone, in closed form
                c0 = float(np.clip(design[:, 0] @ target / (design[:, 0] @ design[:, 0]), 0.0, 50.0))
                x, cost = (c0, 0.0), float(np.sum((target - c0 * design[:, 0]) ** 2))
            else:
                solved = lsq_linear(design, target, bounds=([0.0, 0.0], [50.0, per_seq]), method="bvls")
                x, cost = tuple(solved.x), 2 * solved.cost
            if cost < best[0]:
                best = (cost, (float(scale), float(x[0]), float(x[1]), float(gap)))
    return best[1]


# ------------------------------------------------------------------------------------------ metrics


def ape_stats(pairs: list[tuple[float, float]]) -> dict:
    """Median and mean APE (%) of (predicted, measured) pairs, and the bias: the median log(predicted / measured)
    (a fold whose APE is its bias misses by one factor on every row; one whose bias is near 0 scatters)."""
    if not pairs:
        return {"n": 0}
    apes = [100 * abs(p - m) / m for p, m in pairs]
    return {"n": len(pairs), "median_ape": round(statistics.median(apes), 2), "mean_ape": round(statistics.mean(apes), 2),
            "median_log_ratio": round(statistics.median(math.log(p / m) for p, m in pairs), 3)}


QUANTITIES = ("itl_ms", "ttft_ms", "e2e_ms", "power_w")


def score(scored: list[tuple[Row, dict, dict]]) -> dict:
    """Median / mean APE per quantity, model and baseline, over (row, prediction, baseline) triples."""
    out = {}
    for q in QUANTITIES:
        model = [(p[q], labels(r)[q]) for r, p, _ in scored if q in p]
        base = [(b[q], labels(r)[q]) for r, _, b in scored if q in b]
        if model:
            out[q] = {"lilou": ape_stats(model), "baseline": ape_stats(base),
                      "baseline_kind": "load-scaled TDP" if q == "power_w" else "roofline"}
    return out


def kendall(scored: list[tuple[Row, dict, dict]], quantity: str = "itl_ms", min_gpu_share: float = 0.0) -> dict:
    """Kendall tau between predicted and measured GPU order per (source, model, task, configuration); with
    ``min_gpu_share``, only groups where the predicted GPU time is at least that share of the step on every GPU
    (the host does not decide the order)."""
    from scipy.stats import kendalltau

    groups = defaultdict(list)
    for r, p, b in scored:
        if quantity in p:
            groups[(r.run.source, r.model, r.run.task, r.run.config)].append(
                (r.run.gpu, p[quantity], labels(r)[quantity], b[quantity], p.get("gpu_share", 1.0)))
    taus, base_taus, sizes = [], [], Counter()
    for members in groups.values():
        if min(m[4] for m in members) < min_gpu_share:
            continue
        by_gpu = {}
        for gpu, p, m, b, _ in members:
            by_gpu.setdefault(gpu, (p, m, b))
        if len(by_gpu) < 2:
            continue
        p, m, b = zip(*by_gpu.values())
        if len(set(m)) < 2:
            continue
        taus.append(kendalltau(p, m).statistic)
        base_taus.append(kendalltau(b, m).statistic)
        sizes[len(by_gpu)] += 1
    clean = [t for t in taus if not math.isnan(t)]
    base_clean = [t for t in base_taus if not math.isnan(t)]
    return {"groups": len(clean), "gpus_per_group": dict(sizes),
            "mean_tau": round(float(np.mean(clean)), 3) if clean else None,
            "baseline_mean_tau": round(float(np.mean(base_clean)), 3) if base_clean else None}


def leave_one_out(rows: list[Row], key, reprice=None) -> tuple[dict, list[tuple[Row, dict, dict]],
                                                                 list[tuple[Row, dict, dict]]]:
    """Per-fold scores, every scored row, and the scored rows whose engine version the fold trained on.
    ``reprice(held, rows)``: the rows as the fold prices them (its own attention correction), same order."""
    folds = sorted({key(r) for r in rows})
    per_fold, scored_all, seen_all = {}, [], []
    for held in folds:
        fold_rows = reprice(held, rows) if reprice else rows
        train = [r for r in fold_rows if key(r) != held]
        test = [r for r in fold_rows if key(r) == held]
        consts = fit(train)
        scored = [(r, predictions(r, consts), baselines(r, consts)) for r in test]
        scored_all.extend(scored)
        per_fold[held] = score(scored)
        seen = engine_seen(scored, train)
        seen_all.extend(seen)
        if len(seen) < len(scored):  # an engine version no other fold member measured: its constants are borrowed
            per_fold[held] = {"all_rows": per_fold[held], "engine_seen": score(seen)}
    return per_fold, scored_all, seen_all


def engine_seen(scored: list[tuple[Row, dict, dict]], train: list[Row]) -> list[tuple[Row, dict, dict]]:
    """The scored rows whose engine version has rows in ``train`` (else its host constants are another
    version's: ML.ENERGY v2's vLLM 0.5.4 server in the A100 fold, its only GPU outside the held-back H100)."""
    engines = {_engine(r) for r in train}
    return [x for x in scored if _engine(x[0]) in engines]


def by_fold_engine(scored: list[tuple[Row, dict, dict]], fold_of) -> dict[tuple[str, str], list]:
    """The scored rows per (GPU fold, engine version): a fold's figure mixes engines whose host constants come
    from different rows (the A100 fold's vLLM 0.5.4 server rows borrow another version's)."""
    out: dict[tuple[str, str], list] = defaultdict(list)
    for x in scored:
        out[(fold_of(x[0]), _engine(x[0]))].append(x)
    return dict(out)


#: Fewest leave-one-GPU-out residuals an engine needs for an interval of its own (else it takes the pooled one).
MIN_ENGINE_RESIDUALS = 20


INTERVALS_NOTE = ("; intervals: 90 % half-widths of log(predicted / measured) for an unseen GPU from the "
                  "leave-one-GPU-out residuals: conformal quantile of the within-GPU scatter + 1.645 x the "
                  "between-GPU bias spread (TTFT not validated, never below the pooled ITL)")
#: The standard normal's 95th percentile: a new GPU's bias lies within +-Z90 x the between-GPU spread nine times in ten.
Z90 = 1.6449


def _half_width(residuals: list[float], alpha: float, digits: int | None = 4) -> float | None:
    n = len(residuals)
    if n < 5:
        return None
    rank = min(n, math.ceil((n + 1) * (1 - alpha)))
    value = sorted(residuals)[rank - 1]
    return value if digits is None else round(value, digits)


def _rms(values) -> float:
    values = list(values)
    return math.sqrt(sum(v * v for v in values) / len(values))


def gpu_shift_half_widths(residuals: list[tuple[str, str, float]], alpha: float = 0.1) -> dict[str, float | None]:
    """90 % half-widths of log(predicted / measured) for a GPU outside the fit, from leave-one-GPU-out residuals
    ``(fold, engine, signed log residual)``: a GPU's residuals share a bias b (the median of its fold's residuals of
    that engine) on top of its within-GPU scatter e, and a new GPU brings a bias of its own. Half-width = the
    split-conformal (1 - alpha) quantile of |e| (each residual less its GPU's bias) + Z90 x the between-GPU spread
    of b (root mean square about 0: the mean bias counts too, the interval is centred on the prediction).
    The spread is the engine's own where two GPU folds or more measured it, else (and for ``all``) the pooled one of
    the engines measured on two GPUs or more. The pooled split-conformal quantile of |r| this replaced covered
    0.664 of the ITL and 0.544 of the power rows of a held-out GPU (docs/llm.md)."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for fold, engine, r in residuals:
        groups[(fold, engine)].append(r)
    bias = {k: float(np.median(v)) for k, v in groups.items()}
    folds_of: dict[str, set[str]] = defaultdict(set)
    for fold, engine in groups:
        folds_of[engine].add(fold)
    shared = [b for (_, engine), b in bias.items() if len(folds_of[engine]) >= 2]
    pooled = _rms(shared) if shared else None

    def half(rows, spread):
        within = _half_width([abs(r - bias[(f, e)]) for f, e, r in rows], alpha, digits=None)
        return None if within is None or spread is None else round(within + Z90 * spread, 4)

    out = {"all": half(residuals, pooled)}
    for engine in ENGINE_KEYS:
        mine = [x for x in residuals if x[1] == engine]
        if len(mine) >= MIN_ENGINE_RESIDUALS:
            spread = _rms(bias[(f, engine)] for f in folds_of[engine]) if len(folds_of[engine]) >= 2 else pooled
            out[engine] = half(mine, spread)
    return out


def conformal(scored: list[tuple[Row, dict, dict]], fold_of, alpha: float = 0.1) -> dict[str, dict[str, float | None]]:
    """The 90 % half-widths per output (ITL-like labels serve itl_ms), pooled (``all``) and per engine with at least
    :data:`MIN_ENGINE_RESIDUALS` residuals, for a GPU outside the fit (:func:`gpu_shift_half_widths`; ``fold_of(row)``
    the row's GPU fold). TTFT has 6 residuals, 3 per fold on 2 GPUs: its interval is not validated (no fold
    complement has the 5 a half-width needs) and is never narrower than the pooled ITL one."""
    return half_widths([{"fold": fold_of(r), "engine": _engine(r), **{q: math.log(p[q] / labels(r)[q])
                                                                     for q in ("ttft_ms", "itl_ms", "power_w") if q in p}}
                        for r, p, _ in scored], alpha)


def half_widths(residuals: list[dict], alpha: float = 0.1) -> dict[str, dict[str, float | None]]:
    """:func:`conformal` on residual records ``{"fold", "engine", quantity: log(predicted / measured)}`` (the
    ``logo_log_residuals`` of a benchmark output: ``--intervals-from`` refits the shipped half-widths from them)."""
    out: dict[str, dict[str, float | None]] = {}
    for q in ("itl_ms", "power_w", "ttft_ms"):
        out[q] = gpu_shift_half_widths([(x["fold"], x["engine"], x[q]) for x in residuals if q in x], alpha)
    floor = out["itl_ms"].get("all")
    out["ttft_ms"] = {k: (None if v is None or floor is None else max(v, floor)) for k, v in out["ttft_ms"].items()}
    return {q: out[q] for q in ("ttft_ms", "itl_ms", "power_w")}


def _half_for(half: dict[str, float | None], row: Row) -> float | None:
    return half.get(_engine(row), half.get("all"))


def coverage_out_of_fold(scored: list[tuple[Row, dict, dict]], fold_of) -> dict:
    """Coverage of the 90 % intervals on each fold's rows with half-widths fitted on the other folds' residuals
    only (``fold_of(row)``), pooled over the folds: an out-of-sample check of :func:`conformal`, whose half-widths
    cover about 90 % of the residuals they were fitted on by construction."""
    folds = sorted({fold_of(r) for r, _, _ in scored})
    counts: dict[str, list[bool]] = defaultdict(list)
    seen: dict[str, list[bool]] = defaultdict(list)
    widths: dict[str, list[float]] = defaultdict(list)
    per_fold = {}
    for held in folds:
        test = [x for x in scored if fold_of(x[0]) == held]
        train = [x for x in scored if fold_of(x[0]) != held]
        half = conformal(train, fold_of)
        per_fold[held] = coverage(test, half)
        for q, by_engine in half.items():
            engines = {_engine(r) for r, p, _ in train if q in p}
            for r, p, _ in test:
                h = _half_for(by_engine, r)
                if q not in p or h is None:
                    continue
                inside = abs(math.log(p[q] / labels(r)[q])) <= h
                counts[q].append(inside)
                widths[q].append(h)
                if _engine(r) in engines:
                    seen[q].append(inside)

    def pooled(v):
        return {"n": len(v), "coverage": round(float(np.mean(v)), 3) if v else None}

    return {"pooled": {q: {**pooled(v), "median_half_width": round(float(np.median(widths[q])), 4) if v else None}
                       for q, v in counts.items()},
            "pooled_engine_seen": {q: pooled(seen[q]) for q in counts},
            "per_fold": per_fold}


def log_residuals(scored: list[tuple[Row, dict, dict]], fold_of) -> list[dict]:
    """Every leave-one-GPU-out residual log(predicted / measured), with its fold and engine: what the interval
    methods are fitted and checked on, so they can be compared without rerunning the folds."""
    return [{"fold": fold_of(r), "engine": _engine(r),
             **{q: round(math.log(p[q] / labels(r)[q]), 6) for q in ("ttft_ms", "itl_ms", "power_w") if q in p}}
            for r, p, _ in scored]


def coverage(scored, half: dict) -> dict:
    out = {}
    for q, by_engine in half.items():
        inside = [abs(math.log(p[q] / labels(r)[q])) <= _half_for(by_engine, r) for r, p, _ in scored
                  if q in p and _half_for(by_engine, r) is not None]
        out[q] = {"n": len(inside), "coverage": round(float(np.mean(inside)), 3) if inside else None}
    return out


def held_back_split(rows: list[Row]) -> tuple[list[Row], list[Row]]:
    """(rows the held-back check may fit on, held-back rows): the fit leaves out every GPU on a held-back GPU's die
    (the GH200 beside the H100), not only the held-back names."""
    from lilou.hardware.dies import die_of

    held = [r for r in rows if r.run.held_back]
    dies = {die_of(r.run.gpu) for r in held}
    return [r for r in rows if not r.run.held_back and die_of(r.run.gpu) not in dies], held


def copy_baseline(runs, held_scored: list[tuple[Row, dict, dict]]) -> dict:
    """The twin's measurement as the prediction: each held-back run's label predicted by the same configuration
    (source, model, engine, TP, batch, lengths, dtype) measured on a GPU of the same die (the GH200 for the H100),
    beside Lilou's held-back prediction of the same runs. A model of a held-back GPU should beat this copy."""
    from lilou.hardware.dies import die_of

    def config_key(run):
        return (run.source, run.task, run.model, run.engine, run.tp, round(run.batch, 3), run.input_len,
                round(run.output_len, 3), run.dtype, run.config)

    twin_runs: dict[tuple, dict[str, object]] = defaultdict(dict)
    for run in runs:
        if not run.held_back:
            twin_runs[config_key(run)].setdefault(run.gpu, run)
    predicted = {id(r.run): p for r, p, _ in held_scored}
    out = {}
    for q in QUANTITIES:
        copy, copy_predicted, lilou, twins_used = [], [], [], Counter()
        for run in runs:
            label = getattr(run, q)
            if not run.held_back or not label:
                continue
            twin = next((t for g, t in sorted(twin_runs[config_key(run)].items())
                         if die_of(g) == die_of(run.gpu) and getattr(t, q)), None)
            if twin is None:
                continue
            copy.append((getattr(twin, q), label))
            twins_used[f"{twin.gpu} for {run.gpu}"] += 1
            if q in predicted.get(id(run), {}):
                copy_predicted.append(copy[-1])
                lilou.append((predicted[id(run)][q], label))
        if copy:
            out[q] = {"copy_all_pairs": ape_stats(copy), "copy_runs_lilou_predicts": ape_stats(copy_predicted),
                      "lilou_same_runs": ape_stats(lilou), "pairs": dict(twins_used)}
    return out


# ------------------------------------------------------------------------------ attention kernels


def attention_rows(predictor, per_group: int = 1500):
    """AIConfigurator's vLLM attention kernels (BF16, BF16 KV cache, full attention, CUDA-graph replay) with the
    kernel model's price and the correction's features, per (GPU, phase). H100/L4 rows are not in the table."""
    from lilou.data.kernel_table import kernel_table
    from lilou.hardware import resolve_device
    from lilou.latency.composition.end_to_end import GraphKernels
    from lilou.latency.kernel_model.precision import precision_path
    from lilou.llm.attention import AttentionShape, features
    from lilou.llm.steps import StepShape, attention_kernel

    columns = "gpu, family, batch, seq_len, kv_len, heads, kv_heads, head_dim, latency_ms"
    relation = kernel_table(["aiconfigurator"]).filter(
        "family IN ('attention-prefill', 'attention-decode') AND dtype = 'bf16' AND coalesce(kv_dtype, 'bf16') = 'bf16'"
        " AND coalesce(\"window\", 0) = 0 AND framework LIKE 'VLLM%'")
    out = {}
    for gpu, family in sorted(relation.aggregate("gpu, family").fetchall()):
        rows = relation.filter(f"gpu = '{gpu}' AND family = '{family}'").project(columns).order(
            "hash(batch, seq_len, kv_len, heads, kv_heads, head_dim)").limit(per_group).fetchall()
        device = resolve_device(gpu)
        causal = family == "attention-prefill"
        specs, feats, measured = [], [], []
        for _, _, batch, seq_len, kv_len, heads, kv_heads, head_dim, latency in rows:
            kv_heads = kv_heads or heads
            step = StepShape(batch, seq_len, seq_len, causal=True) if causal else StepShape(batch, 1, kv_len + 1,
                                                                                            causal=False)
            specs.append(attention_kernel(step, heads, kv_heads, head_dim, "bf16", "bf16"))
            feats.append(features(AttentionShape(batch, step.q_len, step.kv_len, heads, kv_heads, head_dim),
                                  device.sms))
            measured.append(latency)
        path = precision_path("bf16", device, None, "off")
        work = np.empty(len(specs))
        # each row priced with the size ladder of its own batch, as LLMPredictor._work prices a step's kernels
        batches = np.array([row[2] for row in rows])
        for batch in np.unique(batches):
            at = np.flatnonzero(batches == batch)
            position = {}
            index = np.fromiter((position.setdefault(specs[i], len(position)) for i in at), dtype=np.int64)
            unique = list(position)
            kernels = GraphKernels(nodes=[("attention",)] * len(at), specs=[specs[i] for i in at], unique=unique,
                                   unique_fallback=np.zeros(len(unique), dtype=bool),
                                   unique_fixed_bytes=np.zeros(len(unique)), index=index)
            work[at] = predictor.model.kernel_work(kernels, [device], int(batch),
                                                   lambda _, path=path: path).work_ms[:, 0]
        out[(gpu, "prefill" if causal else "decode")] = (np.asarray(work), np.asarray(feats), np.asarray(measured))
    return out


def _ape(pred, measured) -> dict:
    apes = 100 * np.abs(np.asarray(pred) - measured) / measured
    return {"n": int(len(apes)), "median_ape": round(float(np.median(apes)), 2),
            "mean_ape": round(float(np.mean(apes)), 2),
            "median_measured_over_predicted": round(float(np.median(measured / np.asarray(pred))), 3)}


def attention_fit(predictor) -> tuple[dict, object, object]:
    """Fit the attention correction (lilou.llm.attention) leave-one-GPU-out over the AIConfigurator GPUs (each
    held out with its twins, the GPUs on its die), report each held-out GPU before (kernel price) and after, and fit
    the shipped correction on every GPU. Also returns ``without(dies)``: the correction fitted on the GPUs of every
    other die, for the serving folds (cached per set of dies)."""
    from lilou.hardware.dies import die_of
    from lilou.llm.attention import AttentionCorrection, fit_phase

    data = attention_rows(predictor)
    gpus = sorted({g for g, _ in data})
    report, fitted = {}, {}
    for phase in ("prefill", "decode"):
        mine = {g: data[(g, phase)] for g in gpus if (g, phase) in data}
        per_gpu = {}
        for held in mine:
            train = [mine[g] for g in mine if die_of(g) != die_of(held)]
            correction = fit_phase(*(np.concatenate([t[i] for t in train]) for i in range(3)))
            work, feats, measured = mine[held]
            after = [correction.apply(w, f) for w, f in zip(work, feats)]
            per_gpu[held] = {"before": _ape(work, measured), "after": _ape(after, measured)}
        everything = [np.concatenate([t[i] for t in mine.values()]) for i in range(3)]
        fitted[phase] = fit_phase(*everything)
        report[phase] = {"per_gpu_held_out": per_gpu,
                         "median_ape_before": round(float(np.median([v["before"]["median_ape"]
                                                                     for v in per_gpu.values()])), 2),
                         "median_ape_after": round(float(np.median([v["after"]["median_ape"]
                                                                    for v in per_gpu.values()])), 2),
                         "shipped": fitted[phase].to_json()}
    cache: dict[frozenset, object] = {}

    def without(dies) -> AttentionCorrection:
        """The correction fitted without the AIConfigurator GPUs on ``dies``."""
        key = frozenset(dies)
        if key not in cache:
            phases = {}
            for phase in ("prefill", "decode"):
                train = [data[(g, phase)] for g in gpus if (g, phase) in data and die_of(g) not in key]
                phases[phase] = fit_phase(*(np.concatenate([t[i] for t in train]) for i in range(3)))
            cache[key] = AttentionCorrection(**phases)
        return cache[key]

    return report, AttentionCorrection(**fitted), without


# --------------------------------------------------------------------------------------- speed


def cli_speed(repeats: int = 5) -> dict:
    command = [sys.executable, "-m", "lilou.cli", "llm", "Llama-3.1-8B-Instruct", "--gpu", "a100-80gb", "--batch",
               "16", "--input-len", "1024", "--output-len", "256", "--format", "json"]
    import resource

    seconds, cpu = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, cwd=ROOT)
        seconds.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    load = os.getloadavg()[0]
    return {"command": " ".join(["lilou"] + command[3:]), "runs": repeats,
            "median_s": round(statistics.median(seconds), 3), "all_s": [round(s, 3) for s in seconds],
            "median_cpu_s": round(statistics.median(cpu), 3), "load_average_1min": round(load, 2),
            "cpus": os.cpu_count()}


# ------------------------------------------------------------------------------------------ main


def run_bench(predictor, quick: bool = False, attention: bool = True) -> dict:
    from lilou.data.llm_energy import serving_runs
    from lilou.llm.attention import AttentionCorrection
    from lilou.llm.predictor import DEFAULT_CALIBRATION, Calibration, LLMPredictor

    from lilou.hardware.dies import chip_groups, die_of

    started = time.perf_counter()
    if attention:
        attention_report, correction, correction_without = attention_fit(predictor)
    else:
        attention_report, correction, correction_without = {}, AttentionCorrection(), lambda dies: AttentionCorrection()
    runs = serving_runs()
    llm = LLMPredictor(predictor, calibration=DEFAULT_CALIBRATION, attention=correction)
    rows, skipped = predict_rows(runs, llm)
    primary = [r for r in rows if not r.run.held_back]
    held = [r for r in rows if r.run.held_back]
    # A serving fold holds out a GPU with its twins (same die); its rows are priced with the attention correction
    # fitted without the AIConfigurator GPUs on that die (the A100-SXM4-80GB for the A100-SXM4-40GB fold, the B200
    # and GB200 for the B200 fold, the H200 for the GH200 fold).
    fold_of = {g: "+".join(group) for group in chip_groups(r.run.gpu for r in primary) for g in group}
    gpu_fold = lambda r: fold_of[r.run.gpu]  # noqa: E731
    repriced: dict[frozenset, list[Row]] = {}

    def priced_without(dies) -> list[Row]:
        """Every predicted row (primary and held back), priced with the attention correction fitted without the
        AIConfigurator GPUs on ``dies``."""
        key = frozenset(dies)
        if not attention or not key:
            return rows
        if key not in repriced:
            again, _ = predict_rows(runs, LLMPredictor(predictor, calibration=DEFAULT_CALIBRATION,
                                                       attention=correction_without(key)))
            assert [r.run for r in again] == [r.run for r in rows]
            repriced[key] = again
        return repriced[key]

    def fold_rows(held_fold: str, _rows) -> list[Row]:
        dies = {die_of(g) for g in held_fold.split("+")}
        return [r for r in priced_without(dies) if not r.run.held_back]

    logo, logo_scored, logo_seen = leave_one_out(primary, key=gpu_fold, reprice=fold_rows)
    lolo, lolo_scored, _ = leave_one_out(primary, key=lambda r: r.model)
    half = conformal(logo_scored, gpu_fold)
    consts = fit(primary)
    # The held-back check: the H100's twins (GH200, the same GH100 die; H200 among the attention rows) are held
    # out of every fit it uses, so it is a GPU none of whose chips was fitted on.
    held_dies = {die_of(r.run.gpu) for r in held}
    check_fit, check_held = held_back_split(priced_without(held_dies))
    check_consts = fit(check_fit)
    held_scored = [(r, predictions(r, check_consts), baselines(r, check_consts)) for r in check_held]
    check_logo = [x for x in logo_scored if die_of(x[0].run.gpu) not in held_dies]
    check_half = conformal(check_logo, gpu_fold)
    calibration = Calibration(itl_scale={e: v[0] for e, v in consts["itl"].items()},
                              itl_step_ms={e: v[1] for e, v in consts["itl"].items()},
                              itl_per_seq_ms={e: v[2] for e, v in consts["itl"].items()},
                              itl_launch_gap_ms={e: v[3] for e, v in consts["itl"].items() if v[3] is not None},
                              ttft_scale=consts["ttft"], power=consts["power"],
                              intervals=half, fitted_on=(
                                  f"{len(primary)} runs of llm_energy on {', '.join(sorted({r.run.gpu for r in primary}))}"
                                  " (H100/L4 held back)" + INTERVALS_NOTE))
    result = {
        "data": {"runs": len(runs), "predicted": len(rows), "primary": len(primary), "held_back": len(held),
                 "skipped": dict(skipped),
                 "primary_by_source_gpu": dict(Counter(f"{r.run.source}/{r.run.gpu}" for r in primary)),
                 "held_back_by_source": dict(Counter(r.run.source for r in held))},
        "leave_one_gpu_out": {"overall": score(logo_scored), "per_gpu": logo,
                              "per_gpu_engine": {f"{fold}/{engine}": score(mine) for (fold, engine), mine
                                                 in sorted(by_fold_engine(logo_scored, gpu_fold).items())},
                              "overall_engine_seen": score(logo_seen),
                              "kendall_tau_gpu_ranking": kendall(logo_scored),
                              "kendall_tau_gpu_bound_groups": {
                                  f"gpu_share>={share}": kendall(logo_scored, min_gpu_share=share)
                                  for share in (0.4, 0.5, 0.6)},
                              "per_source": {s: score([x for x in logo_scored if x[0].run.source == s])
                                             for s in sorted({r.run.source for r in primary})}},
        "leave_one_llm_out": {"overall": score(lolo_scored), "folds": len(lolo)},
        "held_back_independent": {
            "note": ("H100 rows, never fitted on: serving constants fitted on every other GPU except the H100's twins "
                     f"({', '.join(sorted({r.run.gpu for r in primary if die_of(r.run.gpu) in held_dies})) or 'none'}"
                     " held out of this fit, so it differs from the shipped calibration), attention correction "
                     "fitted without the AIConfigurator GPUs on the H100's die, interval half-widths from the "
                     "leave-one-GPU-out residuals of the other dies' folds"),
            "fitted_on_gpus": sorted({r.run.gpu for r in check_fit}),
            "overall": score(held_scored),
            "per_source": {s: score([x for x in held_scored if x[0].run.source == s])
                           for s in sorted({r.run.source for r in held})},
            "kendall_tau_with_h100": kendall(logo_scored + held_scored),
            "interval_coverage": coverage(held_scored, check_half),
            "copy_baseline": copy_baseline(runs, held_scored)},
        "interval_coverage_logo_out_of_fold": coverage_out_of_fold(logo_scored, gpu_fold),
        "interval_coverage_logo_in_sample": {
            "note": ("the half-widths' own residuals, not a validation; below 90 % where a fold's engine version "
                     "no other fold measured (the A100's vLLM 0.5.4 rows: their bias is left out of the half-width)"),
            **coverage(logo_scored, half)},
        "logo_log_residuals": log_residuals(logo_scored, gpu_fold),
        "calibration": calibration.to_json(),
        "constants_per_gpu_fold": {g: {"itl": fit([r for r in primary if r.run.gpu != g])["itl"]}
                                   for g in sorted({r.run.gpu for r in primary})},
    }
    result["attention_kernels_vs_aiconfigurator"] = attention_report
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result, calibration, correction


def shipped_files(write_shipped: bool) -> tuple[Path, ...]:
    """The package files a run rewrites: none for a benchmark (``--out`` or not), the calibration and the
    attention correction only when asked (``--write-shipped``, ``make calibrate-llm``)."""
    return (CALIBRATION, ATTENTION) if write_shipped else ()


def write_intervals(residuals: list[dict], path: Path) -> dict:
    """Rewrite only the ``intervals`` of the calibration file at ``path`` (and the sentence of ``fitted_on`` that
    says how they were fitted); the fitted constants are left byte-identical."""
    data = json.loads(path.read_text())
    data["intervals"] = half_widths(residuals)
    head = data.get("fitted_on", "").split("; intervals:")[0]
    data["fitted_on"] = head + INTERVALS_NOTE
    path.write_text(json.dumps(data, indent=2) + "\n")
    return data


@exit_on_input_error("bench_llm.py")
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the CLI timing")
    parser.add_argument("--no-attention", action="store_true",
                        help="ablation: price attention as the kernel model does (no correction); writes "
                             "outputs/bench/llm_no_attention.json and leaves the shipped files alone")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the figures (default: outputs/bench/llm.json)")
    parser.add_argument("--write-shipped", action="store_true",
                        help="also refit the shipped package files lilou/llm/calibration.json and attention.json "
                             "(`make calibrate-llm`); a benchmark run never writes them otherwise")
    parser.add_argument("--intervals-from", type=Path, default=None, metavar="BENCH_JSON",
                        help="rewrite only the interval half-widths of lilou/llm/calibration.json from the "
                             "leave-one-GPU-out residuals of an earlier run's output (no benchmark run; every "
                             "fitted constant stays as it is)")
    args = parser.parse_args(argv)
    if args.intervals_from:
        write_intervals(json.loads(args.intervals_from.read_text())["logo_log_residuals"], CALIBRATION)
        print(f"wrote the interval half-widths of {CALIBRATION}")
        return 0
    if args.write_shipped and args.no_attention:
        parser.error("--write-shipped refits the shipped attention correction: not with --no-attention")
    from lilou.api import Predictor

    result, calibration, correction = run_bench(Predictor(backend="eager"), quick=args.quick,
                                                attention=not args.no_attention)
    out = args.out or (OUT.with_name("llm_no_attention.json") if args.no_attention else OUT)
    written = shipped_files(args.write_shipped)
    for path, payload in zip(written, (calibration, correction)):
        path.write_text(json.dumps(payload.to_json(), indent=2) + "\n")
    if not args.quick:
        result["cli_speed"] = cli_speed()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    overall = result["leave_one_gpu_out"]["overall"]
    for q, s in overall.items():
        print(f"LOGO {q:9s} lilou median APE {s['lilou'].get('median_ape')} % (n={s['lilou']['n']}), "
              f"{s['baseline_kind']} {s['baseline'].get('median_ape')} %")
    logo = result["leave_one_gpu_out"]
    for q, s in logo["overall_engine_seen"].items():
        print(f"LOGO {q:9s} rows whose engine version another GPU measured: lilou median APE "
              f"{s['lilou'].get('median_ape')} % (n={s['lilou']['n']}), {s['baseline_kind']} {s['baseline'].get('median_ape')} %")
    for gpu, fold in logo["per_gpu"].items():
        if "engine_seen" in fold:
            seen = fold["engine_seen"]
            print(f"  fold {gpu:16s} engine seen: " + ", ".join(
                f"{q} {v['lilou'].get('median_ape')}/{v['baseline'].get('median_ape')}" for q, v in seen.items()))
            fold = fold["all_rows"]
        print(f"  fold {gpu:16s} " + ", ".join(f"{q} {v['lilou'].get('median_ape')}/{v['baseline'].get('median_ape')}"
                                               for q, v in fold.items()))
    for key, by in logo.get("per_gpu_engine", {}).items():
        print(f"  fold/engine {key:36s} " + ", ".join(
            f"{q} {v['lilou'].get('median_ape')} (bias {v['lilou'].get('median_log_ratio')})" for q, v in by.items()))
    for source, by in logo["per_source"].items():
        print(f"  source {source:20s} " + ", ".join(f"{q} {v['lilou'].get('median_ape')}/{v['baseline'].get('median_ape')}"
                                                   for q, v in by.items()))
    print(f"  tau {logo['kendall_tau_gpu_ranking']} GPU-bound {logo['kendall_tau_gpu_bound_groups']}")
    check = result["held_back_independent"]
    print(f"  held back (fitted on {', '.join(check['fitted_on_gpus'])}) {check['overall']}")
    for q, v in check["copy_baseline"].items():
        print(f"  held back {q}: twin's measurement as the prediction {v['copy_runs_lilou_predicts']}, lilou "
              f"{v['lilou_same_runs']} ({v['pairs']}); every pair {v['copy_all_pairs']}")
    print(f"  interval coverage, held back {check['interval_coverage']}")
    print(f"  interval coverage, leave-one-GPU-out out of fold {result['interval_coverage_logo_out_of_fold']['pooled']}")
    seen = result["interval_coverage_logo_out_of_fold"]["pooled_engine_seen"]
    print(f"  ... rows whose engine version another fold measured {seen}")
    print(f"wrote {out}" + "".join(f", {path}" for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
