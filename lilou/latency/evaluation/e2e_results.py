"""The rows and summaries of an end-to-end evaluation (``lilou eval``): one :class:`EvalRow` per label, and the
:class:`EvalResult` that turns them into per-GPU errors, GPU-ranking correlations, per-category breakdowns and the
JSON of ``make bench-e2e``."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lilou.latency.evaluation.scores import ape, kendall, spearman

#: What every label is predicted with: Lilou's model and the roofline baseline.
PREDICTORS = ("model", "roofline")
# A ranking of GPUs is scored only on workloads measured on this many GPUs or more: two GPUs give one pair, and any
# correctly ordered pair has Spearman and Kendall 1.0.
RANKING_MIN_GPUS = 3


@dataclass
class EvalRow:
    gpu: str
    model: str
    seq: int
    batch: int
    measured_ms: float
    fold: str
    kernels: int
    predicted_ms: dict[str, float] = field(default_factory=dict)  # predictor -> ms
    # category -> (measured ms rebuilt from NeuSight's per-node CSV, the model's predicted ms); see breakdown.py
    breakdown: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def workload(self) -> str:
        return f"{self.model}-{self.seq}-{self.batch}"

    def ape(self, predictor: str) -> float:
        return ape(self.predicted_ms[predictor], self.measured_ms)

    def to_json(self) -> dict[str, Any]:
        out = {"gpu": self.gpu, "model": self.model, "seq": self.seq, "batch": self.batch, "fold": self.fold,
               "kernels": self.kernels, "measured_ms": round(self.measured_ms, 3)}
        for predictor, value in self.predicted_ms.items():
            out[f"{predictor}_ms"] = round(value, 3)
            out[f"{predictor}_ape"] = round(self.ape(predictor), 2)
        if self.breakdown:
            out["breakdown_ms"] = {category: {"measured": round(measured, 3), "model": round(predicted, 3)}
                                   for category, (measured, predicted) in self.breakdown.items()}
        return out


@dataclass
class EvalResult:
    mode: str                 # "leave-one-GPU-out" or "in-sample"
    fusion: str
    rows: list[EvalRow]
    folds: dict[str, dict[str, Any]]  # held-out GPU -> fitted parameters and provenance
    kernel_groups: list[str] = field(default_factory=list)  # partition sources (gnn, rules, oracle, none)
    seconds: float = 0.0

    def per_gpu(self) -> list[dict[str, Any]]:
        out = []
        for gpu in sorted({r.gpu for r in self.rows}):
            rows = [r for r in self.rows if r.gpu == gpu]
            out.append({"gpu": gpu, "n": len(rows), **self._errors(rows)})
        return out

    def overall(self) -> dict[str, Any]:
        """Errors pooled over every label (GPUs with more labels weigh more: the A100 has 14 of NeuSight's 37),
        and ``<predictor>_mean_gpu_mape``, the mean of the per-GPU MAPEs (every GPU counts once, as in the
        kernel-level leave-one-GPU-out figures)."""
        out = {"n": len(self.rows), "gpus": len({r.gpu for r in self.rows}), **self._errors(self.rows)}
        per_gpu = self.per_gpu()
        for predictor in PREDICTORS:
            out[f"{predictor}_mean_gpu_mape"] = round(float(np.mean([g[f"{predictor}_mape"] for g in per_gpu])), 2) \
                if per_gpu else None
        return out

    def ranking(self) -> list[dict[str, Any]]:
        """Per workload (model, seq, batch) measured on >= 2 GPUs: rank correlation of GPU latencies."""
        out = []
        for key in sorted({(r.model, r.seq, r.batch) for r in self.rows}):
            rows = sorted((r for r in self.rows if (r.model, r.seq, r.batch) == key), key=lambda r: r.gpu)
            workload = rows[0].workload
            if len(rows) < 2:
                continue
            measured = [r.measured_ms for r in rows]
            entry: dict[str, Any] = {"model": rows[0].model, "workload": workload, "n_gpus": len(rows),
                                     "measured_order": [r.gpu for r in sorted(rows, key=lambda r: r.measured_ms)]}
            for predictor in PREDICTORS:
                predicted = [r.predicted_ms[predictor] for r in rows]
                entry[f"{predictor}_spearman"] = _round(spearman(measured, predicted), 4)
                entry[f"{predictor}_kendall"] = _round(kendall(measured, predicted), 4)
            out.append(entry)
        return out

    def ranking_per_model(self) -> list[dict[str, Any]]:
        """Mean of each model's workload correlations (workloads on >= 2 GPUs), and ``<predictor>_<stat>_3plus``,
        the mean over its workloads on >= 3 GPUs alone (None when it has none): with two GPUs any correctly
        ordered pair scores 1.0, so only those say something about a ranking."""
        workloads = self.ranking()
        out = []
        for model in sorted({w["model"] for w in workloads}):
            picked = [w for w in workloads if w["model"] == model]
            entry: dict[str, Any] = {"model": model, "workloads": len(picked),
                                     "max_gpus": max(w["n_gpus"] for w in picked)}
            for predictor in PREDICTORS:
                for stat in ("spearman", "kendall"):
                    values = [w[f"{predictor}_{stat}"] for w in picked if w[f"{predictor}_{stat}"] is not None]
                    entry[f"{predictor}_{stat}"] = _round(float(np.mean(values)), 4) if values else None
                    values = [w[f"{predictor}_{stat}"] for w in picked
                              if w["n_gpus"] >= RANKING_MIN_GPUS and w[f"{predictor}_{stat}"] is not None]
                    entry[f"{predictor}_{stat}_3plus"] = _round(float(np.mean(values)), 4) if values else None
            entry["workloads_3plus"] = sum(w["n_gpus"] >= RANKING_MIN_GPUS for w in picked)
            out.append(entry)
        return out

    def breakdown_summary(self) -> list[dict[str, Any]]:
        """Per GPU (and "all") and category, over labels with per-node measurements: the mean share of the
        forward pass measured and predicted (%), and the MAPE of the category's ms."""
        from lilou.latency.composition.breakdown import CATEGORIES

        rows = [r for r in self.rows if r.breakdown]
        if not rows:
            return []
        out = []
        for gpu in ["all", *sorted({r.gpu for r in rows})]:
            picked = [r for r in rows if gpu in ("all", r.gpu)]
            for category in CATEGORIES:
                measured = np.array([r.breakdown[category][0] for r in picked])
                predicted = np.array([r.breakdown[category][1] for r in picked])
                measured_total = np.array([sum(m for m, _ in r.breakdown.values()) for r in picked])
                predicted_total = np.array([sum(p for _, p in r.breakdown.values()) for r in picked])
                used = measured > 0
                out.append({"gpu": gpu, "category": category, "labels": len(picked),
                            "measured_share": round(float(np.mean(100 * measured / measured_total)), 2),
                            "model_share": round(float(np.mean(100 * predicted / predicted_total)), 2),
                            "model_mape": _round(float(np.mean(100 * np.abs(predicted[used] - measured[used])
                                                               / measured[used])) if used.any() else math.nan, 2)})
        return out

    @staticmethod
    def _errors(rows: Sequence[EvalRow]) -> dict[str, float]:
        out = {}
        for predictor in PREDICTORS:
            errors = [r.ape(predictor) for r in rows]
            out[f"{predictor}_mape"] = round(float(np.mean(errors)), 2)
            out[f"{predictor}_median_ape"] = round(float(np.median(errors)), 2)
            out[f"{predictor}_max_ape"] = round(float(np.max(errors)), 2)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "fusion": self.fusion, "backend": "eager",
                "labels": "neusight e2e/<GPU>/<model>-inf-<seq>-<batch>.json (eager FP32, not -fusion)",
                "overall": self.overall(), "per_gpu": self.per_gpu(), "ranking_per_model": self.ranking_per_model(),
                "ranking": self.ranking(), "rows": [r.to_json() for r in self.rows], "folds": self.folds,
                "kernel_groups": self.kernel_groups, "breakdown": self.breakdown_summary(),
                "seconds": round(self.seconds, 1)}


def _round(value: float, digits: int) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)
