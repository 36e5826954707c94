"""``lilou plan --plot OUT.png``: predicted latency and its 90 % interval against batch, per device."""
from __future__ import annotations

import os

from lilou.errors import LilouInputError
from lilou.plan.planner import CapacityPlan

#: Devices drawn: the plan's best ones (a chart of 70 devices is unreadable).
MAX_DEVICES = 8


def plot_plan(plan: CapacityPlan, path: str | os.PathLike[str], max_devices: int = MAX_DEVICES) -> list[str]:
    """Write the chart; returns the devices drawn (the plan's first ``max_devices``, or the fastest at the
    smallest batch when no device meets the SLO)."""
    from lilou.report.mpl import pyplot, title_name

    plt = pyplot()

    names = [e.curve or e.device.name for e in plan.entries][:max_devices]
    if not names:
        ranked = sorted((points[0].interval_ms[1], name) for name, points in plan.curves.items() if points)
        names = [name for _, name in ranked[:max_devices]]
    figure, axis = plt.subplots(figsize=(8, 5), dpi=120)
    for name in names:
        points = plan.curves[name]
        batches = [p.batch for p in points]
        line, = axis.plot(batches, [p.latency_ms for p in points], marker="o", markersize=3, label=name)
        lows, highs = [p.interval_ms[0] for p in points], [p.interval_ms[1] for p in points]
        if len(points) == 1:  # a band over one batch has no area: nothing was drawn (a file's fixed batch, an SLO
            #                   missed at batch 1), so its interval is an error bar
            axis.errorbar(batches, [points[0].latency_ms], yerr=[[points[0].latency_ms - lows[0]],
                                                                 [highs[0] - points[0].latency_ms]],
                          fmt="none", ecolor=line.get_color(), elinewidth=1.2, capsize=5)
        else:
            axis.fill_between(batches, lows, highs, color=line.get_color(), alpha=0.18, linewidth=0)
    axis.axhline(plan.slo_ms, color="black", linestyle="--", linewidth=1, label=f"SLO {plan.slo_ms:g} ms")
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("batch")
    axis.set_ylabel("inter-token latency (ms)" if plan.kind == "llm" else "latency (ms)")
    axis.set_title(f"{title_name(plan.model)}: predicted latency, 90 % interval shaded")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    try:
        figure.savefig(path)
    except (OSError, ValueError) as exc:
        raise LilouInputError(f"--plot: cannot write {os.fspath(path)!r}: {exc}") from None
    finally:
        plt.close(figure)
    return names
