"""Mean board power of a prefill or decode phase, from specs and the predicted utilisation.

    P = TDP x clip(idle + memory x u_mem + compute x u_compute, idle, 1)

``u_mem`` is the phase's DRAM traffic over (its predicted time x the device's bandwidth), ``u_compute`` its
FLOPs over (time x the peak of the unit each kernel runs on). ``idle`` is the idle floor as a share of TDP; the
three coefficients are fitted by least squares on measured mean power of GPUs that are not held back
(``scripts/bench_llm.py``, which also refits them inside every leave-one-out fold) and shipped in
``calibration.json``. The result is bounded by TDP by construction.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PowerModel:
    idle: float = 0.2       # share of TDP drawn with nothing running
    memory: float = 0.45    # share of TDP per unit of DRAM utilisation
    compute: float = 0.45   # share of TDP per unit of compute utilisation

    def share(self, u_mem: np.ndarray | float, u_compute: np.ndarray | float) -> np.ndarray:
        """Power as a share of TDP (idle floor .. 1)."""
        raw = self.idle + self.memory * np.asarray(u_mem) + self.compute * np.asarray(u_compute)
        return np.clip(raw, self.idle, 1.0)

    def power_w(self, tdp_w: float, u_mem: float, u_compute: float) -> float:
        return float(tdp_w * self.share(min(u_mem, 1.0), min(u_compute, 1.0)))

    def to_json(self) -> dict[str, float]:
        return {"idle": self.idle, "memory": self.memory, "compute": self.compute}


def fit_power(share: np.ndarray, u_mem: np.ndarray, u_compute: np.ndarray) -> PowerModel:
    """Least-squares coefficients of measured power / TDP on the two utilisations (non-negative, idle >= 0.05)."""
    from scipy.optimize import lsq_linear

    design = np.column_stack([np.ones_like(u_mem), np.minimum(u_mem, 1.0), np.minimum(u_compute, 1.0)])
    result = lsq_linear(design, np.asarray(share, dtype=np.float64), bounds=([0.05, 0.0, 0.0], [0.6, 2.0, 2.0]))
    idle, memory, compute = (float(x) for x in result.x)
    return PowerModel(idle=idle, memory=memory, compute=compute)
