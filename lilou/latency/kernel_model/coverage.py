"""Which precision x math family x architecture class the kernel table has measured.

The tensor-core kernel model (``checkpoints/kernel_latency_tensor``) prices every GEMM and
convolution off the FP32 CUDA cores, but it can only stand behind the combinations it has
measured neighbours for. ``coverage.json`` beside its weights counts, for each precision, math
family (``gemm``: GEMM and batched GEMM rows; ``conv``) and architecture class
(:data:`lilou.hardware.database.ARCHITECTURE_CLASSES`), the table rows and GPUs behind it.
Training the model (``python -m lilou.train experiment=kernel_latency_tensor``) writes it beside the weights, counting
the GPUs it trained on; ``scripts/kernel_coverage.py --out DIR`` writes it for a folder from the whole table (H100 and
L4 rows held back), as ``make train-kernels`` did.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COVERAGE_FILE = "coverage.json"
#: Kernel-table families -> the math family a graph kernel belongs to.
MATH_FAMILY_OF = {"gemm": "gemm", "bmm": "gemm", "conv": "conv"}


@dataclass(frozen=True)
class MeasuredCoverage:
    """Rows and GPUs measured per (precision, math family, architecture class)."""

    rows: dict[tuple[str, str, str], int]
    gpus: dict[tuple[str, str, str], tuple[str, ...]]

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> MeasuredCoverage:
        """A missing file is one line naming the script that writes it (it was "input/output failed", exit 1, for a
        tensor-core model trained before training wrote it)."""
        from lilou.errors import MissingDataError

        path = Path(folder) / COVERAGE_FILE
        if not path.is_file():
            raise MissingDataError(f"{path} missing: the tensor-core kernel model's measured coverage; write it with "
                                   f"`python scripts/kernel_coverage.py --out {folder}`")
        data = json.loads(path.read_text())
        rows, gpus = {}, {}
        for entry in data["entries"]:
            key = (entry["dtype"], entry["family"], entry["architecture"])
            rows[key] = int(entry["rows"])
            gpus[key] = tuple(entry["gpus"])
        return cls(rows, gpus)

    def count(self, precision: str, family: str, architecture: str) -> int:
        return self.rows.get((precision, family, architecture), 0)

    def architectures(self, precision: str, family: str) -> list[str]:
        """Architecture classes with measurements of ``precision`` ``family`` kernels, oldest first."""
        from lilou.hardware.database import ARCHITECTURE_CLASSES

        found = {arch for (p, f, arch), n in self.rows.items() if p == precision and f == family and n}
        return [a for a in ARCHITECTURE_CLASSES if a in found]


def table_coverage(sources: Iterable[str] | None = None, data_dir: str | os.PathLike[str] | None = None,
                   gpus: Iterable[str] | None = None) -> tuple[dict[str, Any], int]:
    """``coverage.json`` content from the kernel table (``sources``, every one by default) and the number of
    dtype x family x GPU groups behind it; ``gpus``: only these (the ones a model trained on)."""
    from lilou.data.kernel_table import kernel_table
    from lilou.hardware.database import architecture_class

    counts = kernel_table(sources, data_dir).query(
        "t", "SELECT dtype, family, gpu, count(*) FROM t WHERE family IN ('gemm', 'bmm', 'conv') "
             "AND mode = 'forward' GROUP BY ALL ORDER BY ALL").fetchall()
    keep = None if gpus is None else set(gpus)
    rows = [(dtype, family, architecture_class(gpu), gpu, n) for dtype, family, gpu, n in counts
            if keep is None or gpu in keep]
    return coverage_entries(rows), len(rows)


def write_coverage(folder: str | os.PathLike[str], coverage: dict[str, Any]) -> Path:
    out = Path(folder) / COVERAGE_FILE
    out.write_text(json.dumps(coverage, indent=1) + "\n")
    return out


def coverage_entries(rows: list[tuple[str, str, str, str, int]]) -> dict[str, Any]:
    """``coverage.json`` content from (dtype, table family, architecture class, gpu, rows) tuples."""
    merged: dict[tuple[str, str, str], dict[str, Any]] = {}
    for dtype, family, architecture, gpu, count in rows:
        math = MATH_FAMILY_OF.get(family)
        if math is None:
            continue
        entry = merged.setdefault((dtype, math, architecture), {"rows": 0, "gpus": set()})
        entry["rows"] += int(count)
        entry["gpus"].add(gpu)
    return {"entries": [{"dtype": d, "family": f, "architecture": a, "rows": e["rows"], "gpus": sorted(e["gpus"])}
                        for (d, f, a), e in sorted(merged.items())]}
