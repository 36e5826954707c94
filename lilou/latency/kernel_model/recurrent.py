"""Recurrent layers (ONNX LSTM, GRU, RNN) as the kernels cuDNN runs: one sequential kernel per layer and direction.

A recurrent layer cannot run its time steps in parallel: step t needs step t-1's hidden state. cuDNN
runs the input projection of every step as one large GEMM, then a loop of small recurrent GEMMs
(batch x gates*hidden x hidden) with the gate arithmetic fused in. Its time is therefore

    time = (input GEMM + steps x directions x recurrent GEMM) / efficiency + steps x directions x step floor

where the input GEMM and the recurrent GEMM are rooflines at the FP32 (or the precision's) peak and
the device's bandwidth, and the step floor (µs) and the efficiency are fitted per cell type on
DeepBench's forward RNN rows (``scripts/fit_recurrent.py`` -> ``recurrent.json`` beside this module,
with its leave-one-GPU-out error). The graph side is :func:`lilou.graph.costs.recurrent_dims`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

#: Gates per cell (ONNX LSTM: i, o, f, c; GRU: z, r, h; RNN: one).
GATES = {"lstm": 4, "gru": 3, "rnn": 1}
PARAMETERS_FILE = "recurrent.json"


@dataclass(frozen=True)
class RecurrentShape:
    """One recurrent layer: its cell, time steps, batch, directions, input and hidden sizes, bytes per element."""

    cell: str
    steps: int
    batch: int
    directions: int
    input_size: int
    hidden: int
    itemsize: int = 4

    def input_gemm(self) -> tuple[float, float]:
        """(FLOPs, bytes) of the input projection of every step, one GEMM per direction."""
        g = GATES[self.cell] * self.hidden
        flops = 2.0 * self.steps * self.batch * self.input_size * g * self.directions
        elements = self.steps * self.batch * (self.input_size + g * self.directions) + self.input_size * g * self.directions
        return flops, elements * self.itemsize

    def recurrent_step(self) -> tuple[float, float]:
        """(FLOPs, bytes) of one time step of one direction: the recurrent GEMM and its gate arithmetic."""
        g = GATES[self.cell] * self.hidden
        flops = 2.0 * self.batch * self.hidden * g + 10.0 * self.batch * g
        elements = self.hidden * g + self.batch * (self.hidden + 2 * g)
        return flops, elements * self.itemsize


@dataclass(frozen=True)
class RecurrentModel:
    """Fitted per cell: the floor of one sequential step (ms) and the efficiency of its recurrent GEMM."""

    step_floor_ms: dict[str, float]
    efficiency: dict[str, float]

    @classmethod
    def load(cls) -> RecurrentModel:
        return _load()

    def work_ms(self, shape: RecurrentShape, peak_tflops: float, bandwidth_gbs: float) -> float:
        """GPU time of one layer (all its directions) on a device with these peaks.

        A vanilla (tanh) RNN step does a quarter of an LSTM step's GEMM and less gate arithmetic, so it is never
        priced above the LSTM of the same shape: its rows (DeepBench's "vanilla" cells) measure hidden sizes of
        1760-2560 only, and the step floor fitted there put a 512-wide RNN at 1.5x the LSTM (5.2 against 3.4 ms on
        an A10G at 100 steps, batch 16).
        """
        cell = shape.cell if shape.cell in self.step_floor_ms else "lstm"
        if cell == "rnn" and "lstm" in self.step_floor_ms:
            lstm = RecurrentShape("lstm", shape.steps, shape.batch, shape.directions, shape.input_size, shape.hidden,
                                  shape.itemsize)
            return min(self._cell_ms(shape, cell, peak_tflops, bandwidth_gbs),
                       self._cell_ms(lstm, "lstm", peak_tflops, bandwidth_gbs))
        return self._cell_ms(shape, cell, peak_tflops, bandwidth_gbs)

    def _cell_ms(self, shape: RecurrentShape, cell: str, peak_tflops: float, bandwidth_gbs: float) -> float:
        flops, nbytes = shape.input_gemm()
        projection = max(flops / (peak_tflops * 1e9), nbytes / (bandwidth_gbs * 1e6))
        step_flops, step_bytes = shape.recurrent_step()
        step = max(step_flops / (peak_tflops * 1e9), step_bytes / (bandwidth_gbs * 1e6))
        sequential = shape.steps * shape.directions
        return (projection + sequential * step) / self.efficiency[cell] + sequential * self.step_floor_ms[cell]


def fit_cell(shapes: list[RecurrentShape], peaks: np.ndarray, bandwidths: np.ndarray,
             measured_ms: np.ndarray) -> tuple[float, float]:
    """(step floor ms, efficiency) minimising the MAPE over rows of one cell type: a grid search, two
    parameters, no optimiser to tune."""
    floors = np.geomspace(1e-4, 3e-1, 71)       # 0.1 µs .. 300 µs per step
    efficiencies = np.geomspace(0.02, 1.0, 41)
    best, best_loss = (floors[0], efficiencies[0]), np.inf
    for floor in floors:
        for efficiency in efficiencies:
            model = RecurrentModel({s.cell: floor for s in shapes}, {s.cell: efficiency for s in shapes})
            predicted = np.array([model.work_ms(s, p, b) for s, p, b in zip(shapes, peaks, bandwidths)])
            loss = float(np.mean(np.abs(predicted - measured_ms) / measured_ms))  # MAPE, as it is scored
            if loss < best_loss:
                best, best_loss = (float(floor), float(efficiency)), loss
    return best


@lru_cache(maxsize=1)
def _load() -> RecurrentModel:
    data = json.loads(resources.files("lilou.latency.kernel_model").joinpath(PARAMETERS_FILE).read_text())
    return RecurrentModel(step_floor_ms=data["step_floor_ms"], efficiency=data["efficiency"])
