"""The per-kernel network: log-latency regressor and kernel-type classifier.

Latency is composed physically so that a GPU outside the training set is reached
through its specs, not memorised:

    latency = floor[family] + roofline(kernel, device) * exp(slowdown(features))

``roofline`` is max(f * FLOPs / peak, bytes / bandwidth) of the device (a MIG slice's
own SMs and bandwidth included). ``f = (150 W / board power) ** power_exponent`` on
boards under 150 W and 1 otherwise: the 70-75 W boards run large GEMMs at a third of
their spec-sheet peak, which no device-normalised feature can tell (one learned
exponent, 0 with ``power_limited=False``). With ``power_duration``, the exponent grows by a
second learned exponent times softplus(log compute time - log tau), tau learned: the 75 W
P4 keeps slowing as a kernel runs longer (half of peak at 0.1 ms, 13 % at 300 ms).
``slowdown`` >= 0 is learned from device-normalised features (waves, tile fill, size
against L2, ...). ``floor`` is the per-launch latency a kernel never goes below in the
measurements: host and driver overhead that no spec sheet gives, learned per family as
a single figure over the training GPUs. The model reports the two parts separately (:meth:`KernelLatencyNet.parts`), so
end-to-end composition can use the GPU work alone and model launch gaps itself.

:class:`KernelLatencyEnsemble` averages several such nets trained from different seeds on the same rows
(``ensemble: N``); measured with two, it moved no fold figure that matters, so the shipped models are single nets
(docs/kernel_model.md, "Session 18").
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from lilou.latency.kernel_model.features import floor_index
from lilou.latency.kernel_model.kernel import FAMILIES
from lilou.latency.kernel_model.kernel_types import KERNEL_TYPES


def _mlp(sizes: Sequence[int], dropout: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(fan_in, fan_out), nn.SiLU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers)


class KernelLatencyNet(nn.Module):
    """Features -> (log latency in ms, kernel-type logits).

    Inputs: latency features [n, d] (device-normalised), kernel-type features [n, d_type]
    (these may include absolute shapes: which algorithm cuDNN or cuBLAS picks depends on
    them), the family index [n] and the roofline inputs [n, 3]
    (:func:`lilou.latency.kernel_model.features.roofline_inputs`).
    Standardisation statistics are buffers, saved with the weights.
    """

    def __init__(self, num_features: int, num_type_features: int, hidden: Sequence[int] = (256, 256, 128),
                 type_hidden: Sequence[int] = (128, 64), dropout: float = 0.0,
                 initial_floor_ms: float = 0.02, power_limited: bool = False,
                 power_duration: bool = False, num_timings: int = 1, floor_units: int = 1) -> None:
        super().__init__()
        self.num_timings = num_timings
        self.floor_units = floor_units
        # softplus(raw) is the power exponent; a buffer (fixed at 0) when not power-limited.
        raw = torch.tensor(-2.0 if power_limited else float("-inf"))
        if power_limited:
            self.power_raw = nn.Parameter(raw)
        else:
            self.register_buffer("power_raw", raw, persistent=False)  # not saved: older checkpoints load
        # softplus(duration_raw) scales an extra slowdown of low-power boards for kernels whose compute time at
        # peak exceeds exp(log_duration_ms) (they keep slowing as they run); buffers (no effect) when off.
        if power_duration:
            self.duration_raw = nn.Parameter(torch.tensor(-2.0))
            self.log_duration_ms = nn.Parameter(torch.tensor(0.0))
        else:
            self.register_buffer("duration_raw", torch.tensor(float("-inf")), persistent=False)
            self.register_buffer("log_duration_ms", torch.tensor(0.0), persistent=False)
        self.register_buffer("feature_mean", torch.zeros(num_features))
        self.register_buffer("feature_std", torch.ones(num_features))
        self.register_buffer("type_feature_mean", torch.zeros(num_type_features))
        self.register_buffer("type_feature_std", torch.ones(num_type_features))
        self.trunk = _mlp([num_features, *hidden], dropout)
        self.slowdown = nn.Linear(hidden[-1], 1)
        self.type_head = nn.Sequential(_mlp([num_type_features, *type_hidden], dropout),
                                       nn.Linear(type_hidden[-1], len(KERNEL_TYPES)))
        # One floor per family, or per (timing method, family): graph replay and profiler kernel time carry no
        # launch overhead, eager CUDA events do (index timing * len(FAMILIES) + family; timing 0 is eager).
        # With ``floor_units`` > 1, one floor per compute unit too (:func:`floor_index`): a serving framework's
        # FP8 GEMM module quantises its activations first (about 5 us under CUDA-graph replay), its BF16 GEMM
        # does not (about 2 us); one shared floor sat between them, above every tiny BF16 GEMM measured.
        self.log_floor = nn.Parameter(torch.full((num_timings * floor_units * len(FAMILIES),),
                                                 float(torch.tensor(initial_floor_ms).log())))

    def start_floors_at(self, log_latency: torch.Tensor, quantile: float, family: torch.Tensor,
                        timing: torch.Tensor | None = None, unit: torch.Tensor | None = None) -> None:
        """Start each launch floor at the ``quantile`` of the log latency of its training rows: those of its timing
        method, family and (with ``floor_units`` > 1) unit, or, for a unit without rows (FP4 when every Blackwell
        GPU is held out), those of its timing method and family on every unit.

        The floors start at ``initial_floor_ms`` otherwise: 20 us, from where about 1,600 optimiser steps
        moved the CUDA-graph GEMM floor only to 5.8 us, above most tiny BF16 GEMMs measured (2-3 us)."""
        def start(index: torch.Tensor, slots: int) -> None:
            for group in torch.unique(index):
                value = torch.quantile(log_latency[index == group].double(), quantile).float()
                for slot in range(slots):
                    self.log_floor[group + slot * len(FAMILIES)] = value

        with torch.no_grad():
            start(floor_index(family, timing, None, self.floor_units), self.floor_units)  # unit 0's slot, then all
            if self.floor_units > 1 and unit is not None:
                start(floor_index(family, timing, unit, self.floor_units), 1)

    def set_normalisation(self, features: torch.Tensor, type_features: torch.Tensor) -> None:
        """Standardise each feature by its training rows. A feature constant there (the DP4A unit's one-hot when
        every Pascal GPU is held out) gets a scale of 1e6, so that the network ignores it: with the old floor of
        1e-6 a held-out row that sets it reached the network as 1e6 and its prediction overflowed."""
        def scale(values: torch.Tensor) -> torch.Tensor:
            std = values.std(dim=0)
            return torch.where(std < 1e-6, torch.full_like(std, 1e6), std)

        self.feature_mean.copy_(features.mean(dim=0))
        self.feature_std.copy_(scale(features))
        self.type_feature_mean.copy_(type_features.mean(dim=0))
        self.type_feature_std.copy_(scale(type_features))

    @property
    def power_exponent(self) -> torch.Tensor:
        return nn.functional.softplus(self.power_raw)

    @property
    def duration_exponent(self) -> torch.Tensor:
        return nn.functional.softplus(self.duration_raw)

    def log_roofline(self, roofline: torch.Tensor) -> torch.Tensor:
        """log max(f * compute, memory) from the [n, 3] roofline inputs."""
        log_compute, log_memory, log_power = roofline[:, 0], roofline[:, 1], roofline[:, 2]
        beyond = nn.functional.softplus(log_compute - self.log_duration_ms)
        log_compute = log_compute + (self.power_exponent + self.duration_exponent * beyond) * log_power
        return torch.maximum(log_compute, log_memory)

    def parts(self, features: torch.Tensor, type_features: torch.Tensor, family: torch.Tensor,
              roofline: torch.Tensor, timing: torch.Tensor | None = None, unit: torch.Tensor | None = None):
        """(log floor ms, log work ms, type logits) per kernel; ``timing`` indexes the timing method
        (None: the first, eager CUDA events), ``unit`` the compute unit (None: FP32 CUDA cores)."""
        log_roofline_ms = self.log_roofline(roofline)
        hidden = self.trunk((features - self.feature_mean) / self.feature_std)
        log_work = log_roofline_ms + nn.functional.softplus(self.slowdown(hidden).squeeze(-1))
        type_logits = self.type_head((type_features - self.type_feature_mean) / self.type_feature_std)
        index = floor_index(family, timing, unit if self.floor_units > 1 else None, self.floor_units)
        return self.log_floor[index], log_work, type_logits

    def forward(self, features: torch.Tensor, type_features: torch.Tensor, family: torch.Tensor,
                roofline: torch.Tensor, timing: torch.Tensor | None = None, unit: torch.Tensor | None = None):
        log_floor, log_work, type_logits = self.parts(features, type_features, family, roofline, timing, unit)
        return torch.logaddexp(log_floor, log_work), type_logits


class KernelLatencyEnsemble(nn.Module):
    """Nets trained on the same rows from different seeds; their log floors, log work and type logits are averaged,
    so a time is the geometric mean of the members' times. Same interface as :class:`KernelLatencyNet`."""

    def __init__(self, members: Sequence[KernelLatencyNet]) -> None:
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one member")
        self.members = nn.ModuleList(members)
        self.num_timings = members[0].num_timings
        self.floor_units = members[0].floor_units

    def parts(self, features: torch.Tensor, type_features: torch.Tensor, family: torch.Tensor,
              roofline: torch.Tensor, timing: torch.Tensor | None = None, unit: torch.Tensor | None = None):
        """The members' (log floor ms, log work ms, type logits), each averaged over the members."""
        each = [m.parts(features, type_features, family, roofline, timing, unit) for m in self.members]
        return tuple(torch.stack(part).mean(dim=0) for part in zip(*each))

    def forward(self, features: torch.Tensor, type_features: torch.Tensor, family: torch.Tensor,
                roofline: torch.Tensor, timing: torch.Tensor | None = None, unit: torch.Tensor | None = None):
        log_floor, log_work, type_logits = self.parts(features, type_features, family, roofline, timing, unit)
        return torch.logaddexp(log_floor, log_work), type_logits
