"""Breakdown plot of a prediction: the kernels that take the most predicted time.

A horizontal bar chart (matplotlib, Agg backend: no display needed), one bar per
kernel, labelled with its ONNX ops and kernel type; fallback kernels are drawn in
another colour and the title gives the total and the fallback share.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from lilou.errors import LilouInputError

if TYPE_CHECKING:
    from lilou.api import Prediction

MODEL_COLOUR = "#3b75af"
FALLBACK_COLOUR = "#ef8636"


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _label(kernel) -> str:
    ops = _shorten("+".join(dict.fromkeys(kernel.ops)), 36)
    return f"{ops} ({_shorten(kernel.nodes[0], 28)})  [{kernel.type}]"


def plot_breakdown(prediction: Prediction, path: str | os.PathLike[str], top: int = 15) -> None:
    """Write the breakdown of ``prediction`` to ``path`` (format from the extension, e.g. .png)."""
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    if not os.path.isdir(folder):
        raise LilouInputError(f"--plot: folder {folder!r} does not exist")
    from lilou.report.mpl import pyplot, title_name

    plt = pyplot()
    from matplotlib.patches import Patch

    kernels = prediction.top(top)[::-1]  # largest at the top
    height = 1.5 + 0.32 * len(kernels)
    figure, axes = plt.subplots(figsize=(9.5, height))
    try:
        axes.barh(range(len(kernels)), [k.latency_ms for k in kernels],
                  color=[FALLBACK_COLOUR if k.fallback else MODEL_COLOUR for k in kernels])
        axes.set_yticks(range(len(kernels)), [_label(k) for k in kernels], fontsize=8)
        axes.set_xlabel("predicted time (ms)")
        device = prediction.gpu if prediction.mig is None else f"{prediction.gpu} MIG {prediction.mig}"
        axes.set_title(f"{title_name(prediction.model)} on {device} ({prediction.backend}): "
                       f"{prediction.latency_ms:.3f} ms, {len(prediction.kernels)} kernels; "
                       f"fallback {100 * prediction.fallback_share:.1f} %", fontsize=9)
        fallback = prediction.fallback_kernels
        ops = ", ".join(dict.fromkeys(op for k in fallback for op in k.ops))
        figure.text(0.01, 0.01, _shorten(f"memory-bound fallback: {len(fallback)} kernels"
                                         f"{f' ({ops})' if ops else ''}, {100 * prediction.fallback_share:.1f} % "
                                         "of the predicted time", 150), fontsize=8, color="#555555")
        axes.legend(handles=[Patch(color=MODEL_COLOUR, label="per-kernel model"),
                             Patch(color=FALLBACK_COLOUR, label="memory-bound fallback")],
                    loc="lower right", fontsize=8)
        figure.tight_layout(rect=(0, 0.03, 1, 1))
        try:
            figure.savefig(path, dpi=120)
        except (OSError, ValueError) as exc:
            raise LilouInputError(f"--plot: cannot write {os.fspath(path)!r}: {exc}") from None
    finally:
        plt.close(figure)
