"""Calibrated 90 % intervals, extrapolation flags and capacity plans over devices and batch sizes.

* :mod:`lilou.plan.calibration` / :mod:`lilou.plan.intervals`: the shipped calibration file and the
  intervals every prediction carries (``interval_ms``); :mod:`lilou.plan.fit` regenerates the file;
* :mod:`lilou.plan.extrapolation`: whether a kernel lies inside the measured range;
* :func:`plan_model` / :func:`plan_llm` (:mod:`lilou.plan.planner`): ``lilou plan``; :func:`read_prices`
  (:mod:`lilou.plan.prices`), :func:`resource_name` (:mod:`lilou.plan.kubernetes`).

Imports are lazy: :mod:`lilou.api` imports the interval modules, and the planner imports :mod:`lilou.api`.
"""
from __future__ import annotations

__all__ = ["CapacityPlan", "plan_llm", "plan_model", "read_prices", "resource_name"]


def __getattr__(name: str):
    if name in ("CapacityPlan", "plan_model", "plan_llm"):
        from lilou.plan import planner

        return getattr(planner, name)
    if name == "read_prices":
        from lilou.plan.prices import read_prices

        return read_prices
    if name == "resource_name":
        from lilou.plan.kubernetes import resource_name

        return resource_name
    raise AttributeError(f"module 'lilou.plan' has no attribute {name!r}")
