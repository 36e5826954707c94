"""The modules of the decomposition corpus (:mod:`lilou.zoo.decomp`): each op, alone or in its small sequence."""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from lilou.errors import LilouInputError
from lilou.zoo.decomp import CHANNELS, EXAMPLE_BATCH, OPS, WIDTH, OpSpec, input_layout, parse


class Lambda(nn.Module):
    """A functional op as a module (so ``nn.Sequential`` can chain it)."""

    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(*xs)


class RNNOutput(nn.Module):
    """An ``nn.LSTM``/``nn.GRU``/``nn.RNN`` that returns its output sequence only."""

    def __init__(self, rnn: nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


class Loss(nn.Module):
    """A loss between the input and a fixed target (a buffer: the graph has one input)."""

    def __init__(self, loss: nn.Module, target: torch.Tensor) -> None:
        super().__init__()
        self.loss = loss
        self.register_buffer("target", target)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.loss(x, self.target)


def _class_target(n: int, classes: int) -> torch.Tensor:
    return torch.arange(n) % classes


#: op key (:data:`lilou.zoo.decomp.OPS`) -> the op as a module for feature/channel width ``w``.
MAKERS: dict[str, Callable[[int], nn.Module]] = {
    "gelu-erf": lambda w: nn.GELU(),
    "gelu-tanh": lambda w: nn.GELU(approximate="tanh"),
    "silu": lambda w: nn.SiLU(),
    "mish": lambda w: nn.Mish(),
    "softplus": lambda w: nn.Softplus(beta=2.0),
    "elu": lambda w: nn.ELU(),
    "selu": lambda w: nn.SELU(),
    "celu": lambda w: nn.CELU(alpha=0.5),
    "hardswish": lambda w: nn.Hardswish(),
    "hardsigmoid": lambda w: nn.Hardsigmoid(),
    "leaky-relu": lambda w: nn.LeakyReLU(0.1),
    "relu6": lambda w: nn.ReLU6(),
    "layer-norm": lambda w: nn.LayerNorm(w),
    "rms-norm": lambda w: nn.RMSNorm(w),
    "l2-normalize": lambda w: Lambda(lambda x: F.normalize(x, dim=-1)),
    "l1-normalize": lambda w: Lambda(lambda x: F.normalize(x, p=1.0, dim=-1)),
    "group-norm": lambda w: nn.GroupNorm(2, w),
    "instance-norm": lambda w: nn.InstanceNorm2d(w, affine=True),
    "batch-norm": lambda w: nn.BatchNorm2d(w),
    "batch-norm-train": lambda w: nn.BatchNorm2d(w).train(),
    "softmax": lambda w: nn.Softmax(dim=-1),
    "log-softmax": lambda w: nn.LogSoftmax(dim=-1),
    "mse-loss": lambda w: Loss(nn.MSELoss(), torch.ones(2, 6, w)),
    "smooth-l1-loss": lambda w: Loss(nn.SmoothL1Loss(), torch.ones(2, 6, w)),
    "bce-logits-loss": lambda w: Loss(nn.BCEWithLogitsLoss(), torch.ones(2, 6, w)),
    "cross-entropy": lambda w: Loss(nn.CrossEntropyLoss(), _class_target(12, w)),
    "max-pool": lambda w: nn.MaxPool2d(3, stride=2, padding=1),
    "avg-pool": lambda w: nn.AvgPool2d(2),
    "avg-pool-ceil": lambda w: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    "adaptive-avg-pool": lambda w: nn.AdaptiveAvgPool2d(4),
    "adaptive-max-pool": lambda w: nn.AdaptiveMaxPool2d(1),
    "lstm": lambda w: RNNOutput(nn.LSTM(w, w, batch_first=True)),
    "lstm-bi2": lambda w: RNNOutput(nn.LSTM(w, w, num_layers=2, batch_first=True, bidirectional=True)),
    "gru": lambda w: RNNOutput(nn.GRU(w, w, batch_first=True)),
    "gru-bi": lambda w: RNNOutput(nn.GRU(w, w, batch_first=True, bidirectional=True)),
    "rnn-tanh": lambda w: RNNOutput(nn.RNN(w, w, batch_first=True)),
}


def _example(layout: str, width: int) -> torch.Tensor:
    batch = EXAMPLE_BATCH.get(layout, EXAMPLE_BATCH["tokens"])
    if layout == "image":
        return torch.zeros(batch, width, 8, 8)
    if layout == "logits":
        return torch.zeros(batch, width)
    return torch.zeros(batch, 6, width)


def _sequence(form: str, spec: OpSpec) -> tuple[nn.Module, torch.Tensor]:
    """``lin``: Linear -> op -> sum(-1); ``conv``: Conv2d 3x3 -> op -> mean over H, W (both from WIDTH / CHANNELS)."""
    if form == "lin":
        op = MAKERS[spec.op](WIDTH)
        reduce = Lambda(lambda x: x) if spec.kind == "loss" else Lambda(lambda x: x.sum(-1))
        return nn.Sequential(nn.Linear(WIDTH, WIDTH), op, reduce), _example(input_layout(form, spec), WIDTH)
    if form == "conv":
        op = MAKERS[spec.op](2 * CHANNELS)
        return (nn.Sequential(nn.Conv2d(CHANNELS, 2 * CHANNELS, 3, padding=1), op, Lambda(lambda x: x.mean((2, 3)))),
                _example(input_layout(form, spec), CHANNELS))
    raise ValueError(f"unknown sequence form {form!r}")


def build_entry(name: str, batch: int | None = None) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The module (eval mode unless the op is a train-mode one) and its example input.

    ``batch`` replaces the leading dimension of the example input (losses keep theirs: the target is fixed).
    """
    parsed = parse(name)
    if parsed is None:
        raise KeyError(name)
    form, op = parsed
    spec = OPS[op]
    torch.manual_seed(0)
    if form == "op":
        width = CHANNELS if spec.layout == "image" else WIDTH
        module, x = MAKERS[spec.op](width), _example(spec.layout, width)
    else:
        module, x = _sequence(form, spec)
    train = op.endswith("-train")
    module.train(train)
    if train:  # only the op itself runs in training mode
        for child in module.modules():
            if not isinstance(child, nn.BatchNorm2d):
                child.train(False)
    if batch is not None and spec.kind == "loss" and batch != x.shape[0]:
        raise LilouInputError(f"{name} has a fixed target of batch {x.shape[0]}; it takes no --batch")
    if batch is not None:
        x = torch.zeros(batch, *x.shape[1:])
    return module, (x,)
