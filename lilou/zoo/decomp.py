"""The decomposition corpus: aten ops that exporters write as several ONNX nodes, alone and in small sequences.

Users' exports meet the fusion model with forms the zoo's architecture families
rarely hold: an erf-form GELU (``Div, Erf, Add, Mul, Mul``), Softplus, ELU, an L2
``F.normalize``, a bidirectional LSTM. Each entry here is one such aten op on tiny
shapes (exporting is the slow part, not the size), either alone (``op-<op>``) or
inside a sequence that gives it real neighbours: ``lin-<op>`` (Linear -> op -> sum
over the last axis) and ``conv-<op>`` (Conv2d -> op -> mean over the image). The
fusion dataset exports every entry under several exporter settings
(:data:`lilou.fusion.dataset.CORPUS_EXPORTERS`) and labels it with the oracles.

Every entry has an ``op`` key (the aten op it is about); the leave-op-out split of
``make bench-fusion`` holds out every entry of some keys. ``kind`` is the coarse
class of the op (activation, norm, loss, softmax, pool, rnn).

Left out on purpose: a hand-written swish (``x * torch.sigmoid(x)``). Its ONNX graph
is node for node the one ``nn.SiLU`` exports (``Sigmoid``, ``Mul`` of the same
input), but eager runs it as two kernels (two aten calls) where SiLU runs one: the
two labels would contradict each other on identical inputs. The GNN follows SiLU.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lilou.errors import LilouInputError

#: Feature width of the tiny inputs: (2, 6, 16) token tensors and (1, 4, 8, 8) images.
WIDTH = 16
CHANNELS = 4


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


@dataclass(frozen=True)
class OpSpec:
    """One aten op of the corpus. ``layout`` says which input it takes: ``tokens`` (2, 6, 16) or ``image``
    (1, 4, 8, 8); ``make(width)`` builds the op for that feature/channel width."""

    op: str
    kind: str
    layout: str
    make: Callable[[int], nn.Module]
    sequences: tuple[str, ...] = ("lin", "conv")


def _class_target(n: int, classes: int) -> torch.Tensor:
    return torch.arange(n) % classes


def _ops() -> list[OpSpec]:
    act = "activation"
    ops = [
        OpSpec("gelu-erf", act, "tokens", lambda w: nn.GELU()),
        OpSpec("gelu-tanh", act, "tokens", lambda w: nn.GELU(approximate="tanh")),
        OpSpec("silu", act, "tokens", lambda w: nn.SiLU()),
        OpSpec("mish", act, "tokens", lambda w: nn.Mish()),
        OpSpec("softplus", act, "tokens", lambda w: nn.Softplus(beta=2.0)),
        OpSpec("elu", act, "tokens", lambda w: nn.ELU()),
        OpSpec("selu", act, "tokens", lambda w: nn.SELU()),
        OpSpec("celu", act, "tokens", lambda w: nn.CELU(alpha=0.5)),
        OpSpec("hardswish", act, "image", lambda w: nn.Hardswish()),
        OpSpec("hardsigmoid", act, "image", lambda w: nn.Hardsigmoid()),
        OpSpec("leaky-relu", act, "image", lambda w: nn.LeakyReLU(0.1)),
        OpSpec("relu6", act, "image", lambda w: nn.ReLU6()),
        OpSpec("layer-norm", "norm", "tokens", lambda w: nn.LayerNorm(w), sequences=("lin",)),
        OpSpec("rms-norm", "norm", "tokens", lambda w: nn.RMSNorm(w), sequences=("lin",)),
        OpSpec("l2-normalize", "norm", "tokens", lambda w: Lambda(lambda x: F.normalize(x, dim=-1))),
        OpSpec("l1-normalize", "norm", "tokens", lambda w: Lambda(lambda x: F.normalize(x, p=1.0, dim=-1))),
        OpSpec("group-norm", "norm", "image", lambda w: nn.GroupNorm(2, w), sequences=("conv",)),
        OpSpec("instance-norm", "norm", "image", lambda w: nn.InstanceNorm2d(w, affine=True), sequences=("conv",)),
        OpSpec("batch-norm", "norm", "image", lambda w: nn.BatchNorm2d(w), sequences=("conv",)),
        OpSpec("batch-norm-train", "norm", "image", lambda w: nn.BatchNorm2d(w).train(), sequences=("conv",)),
        OpSpec("softmax", "softmax", "tokens", lambda w: nn.Softmax(dim=-1), sequences=("lin",)),
        OpSpec("log-softmax", "softmax", "tokens", lambda w: nn.LogSoftmax(dim=-1), sequences=("lin",)),
        OpSpec("mse-loss", "loss", "tokens", lambda w: Loss(nn.MSELoss(), torch.ones(2, 6, w)), sequences=("lin",)),
        OpSpec("smooth-l1-loss", "loss", "tokens", lambda w: Loss(nn.SmoothL1Loss(), torch.ones(2, 6, w)),
               sequences=("lin",)),
        OpSpec("bce-logits-loss", "loss", "tokens",
               lambda w: Loss(nn.BCEWithLogitsLoss(), torch.ones(2, 6, w)), sequences=("lin",)),
        OpSpec("cross-entropy", "loss", "logits", lambda w: Loss(nn.CrossEntropyLoss(), _class_target(12, w)),
               sequences=("lin",)),
        OpSpec("max-pool", "pool", "image", lambda w: nn.MaxPool2d(3, stride=2, padding=1), sequences=("conv",)),
        OpSpec("avg-pool", "pool", "image", lambda w: nn.AvgPool2d(2), sequences=("conv",)),
        OpSpec("avg-pool-ceil", "pool", "image",
               lambda w: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
               sequences=("conv",)),
        OpSpec("adaptive-avg-pool", "pool", "image", lambda w: nn.AdaptiveAvgPool2d(4), sequences=("conv",)),
        OpSpec("adaptive-max-pool", "pool", "image", lambda w: nn.AdaptiveMaxPool2d(1), sequences=("conv",)),
        OpSpec("lstm", "rnn", "tokens", lambda w: RNNOutput(nn.LSTM(w, w, batch_first=True)), sequences=("lin",)),
        OpSpec("lstm-bi2", "rnn", "tokens",
               lambda w: RNNOutput(nn.LSTM(w, w, num_layers=2, batch_first=True, bidirectional=True)),
               sequences=("lin",)),
        OpSpec("gru", "rnn", "tokens", lambda w: RNNOutput(nn.GRU(w, w, batch_first=True)), sequences=("lin",)),
        OpSpec("gru-bi", "rnn", "tokens", lambda w: RNNOutput(nn.GRU(w, w, batch_first=True, bidirectional=True)),
               sequences=("lin",)),
        OpSpec("rnn-tanh", "rnn", "tokens", lambda w: RNNOutput(nn.RNN(w, w, batch_first=True)), sequences=("lin",)),
    ]
    return ops


#: op key -> spec, in a fixed order.
OPS: dict[str, OpSpec] = {spec.op: spec for spec in _ops()}


#: The leading (batch) dimension of each layout's example input.
_EXAMPLE_BATCH = {"image": 1, "logits": 12, "tokens": 2}


def _example(layout: str, width: int) -> torch.Tensor:
    batch = _EXAMPLE_BATCH.get(layout, _EXAMPLE_BATCH["tokens"])
    if layout == "image":
        return torch.zeros(batch, width, 8, 8)
    if layout == "logits":
        return torch.zeros(batch, width)
    return torch.zeros(batch, 6, width)


def _input_layout(form: str, spec: OpSpec) -> str:
    """The layout of the example input of ``form`` (``op``, ``lin``, ``conv``) of ``spec``."""
    if form == "op":
        return spec.layout
    if form == "conv":
        return "image"
    return "logits" if spec.layout == "logits" else "tokens"


def example_batch(name: str) -> int:
    """The batch (leading dimension) a corpus entry exports with when no ``--batch`` is given."""
    form, op = parse(name)  # type: ignore[misc]
    return _EXAMPLE_BATCH.get(_input_layout(form, OPS[op]), _EXAMPLE_BATCH["tokens"])


def _sequence(form: str, spec: OpSpec) -> tuple[nn.Module, torch.Tensor]:
    """``lin``: Linear -> op -> sum(-1); ``conv``: Conv2d 3x3 -> op -> mean over H, W (both from WIDTH / CHANNELS)."""
    if form == "lin":
        op = spec.make(WIDTH)
        reduce = Lambda(lambda x: x) if spec.kind == "loss" else Lambda(lambda x: x.sum(-1))
        return nn.Sequential(nn.Linear(WIDTH, WIDTH), op, reduce), _example(_input_layout(form, spec), WIDTH)
    if form == "conv":
        op = spec.make(2 * CHANNELS)
        return (nn.Sequential(nn.Conv2d(CHANNELS, 2 * CHANNELS, 3, padding=1), op, Lambda(lambda x: x.mean((2, 3)))),
                _example(_input_layout(form, spec), CHANNELS))
    raise ValueError(f"unknown sequence form {form!r}")


def corpus_names() -> list[str]:
    """Every corpus entry's zoo name: ``op-<op>`` alone, then ``lin-<op>`` / ``conv-<op>`` sequences."""
    names = [f"op-{op}" for op in OPS]
    names += [f"{form}-{op}" for op, spec in OPS.items() for form in spec.sequences]
    return names


def parse(name: str) -> tuple[str, str] | None:
    """``(form, op)`` of a corpus name, or None when ``name`` is not one."""
    form, _, op = name.partition("-")
    if op in OPS and (form == "op" or form in OPS[op].sequences):
        return form, op
    return None


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
        module, x = spec.make(width), _example(spec.layout, width)
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


def op_of(name: str) -> str:
    """The op key of a corpus name (``lin-gelu-erf`` -> ``gelu-erf``)."""
    parsed = parse(name)
    if parsed is None:
        raise KeyError(name)
    return parsed[1]
