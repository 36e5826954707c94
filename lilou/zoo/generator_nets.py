"""The ``torch.nn`` modules of the generator families, each built from its spec (:mod:`lilou.zoo.generators`)."""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from lilou.zoo.generators import (
    BINARY_OPS,
    DARTS_OPS,
    NAS201_EDGES,
    NAS201_OPS,
    UNARY_OPS,
    CNNSpec,
    DARTSSpec,
    MLPSpec,
    NAS201Spec,
    RandDAGSpec,
)

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "hardswish": nn.Hardswish,
    "sigmoid": nn.Sigmoid,
    "tanh": nn.Tanh,
}


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(math.gcd(8, channels), channels)
    return nn.Identity()


# --- CNN family ------------------------------------------------------------------------


class CNNBlock(nn.Module):
    def __init__(self, spec: CNNSpec, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        k, pad = spec.kernel, spec.kernel // 2
        act = ACTIVATIONS[spec.activation]
        if spec.block == "plain":
            layers = [nn.Conv2d(c_in, c_out, k, stride, pad), _norm(spec.norm, c_out), act(),
                      nn.Conv2d(c_out, c_out, k, 1, pad), _norm(spec.norm, c_out)]
        elif spec.block == "bottleneck":
            mid = max(8, c_out // 4)
            layers = [nn.Conv2d(c_in, mid, 1), _norm(spec.norm, mid), act(),
                      nn.Conv2d(mid, mid, k, stride, pad), _norm(spec.norm, mid), act(),
                      nn.Conv2d(mid, c_out, 1), _norm(spec.norm, c_out)]
        else:  # depthwise
            layers = [nn.Conv2d(c_in, c_in, k, stride, pad, groups=c_in), _norm(spec.norm, c_in), act(),
                      nn.Conv2d(c_in, c_out, 1), _norm(spec.norm, c_out)]
        self.body = nn.Sequential(*layers)
        self.shortcut: nn.Module | None = None
        if spec.residual:
            same = c_in == c_out and stride == 1
            self.shortcut = nn.Identity() if same else nn.Conv2d(c_in, c_out, 1, stride)
        self.act = act()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        if self.shortcut is not None:
            y = y + self.shortcut(x)
        return self.act(y)


class CNN(nn.Module):
    def __init__(self, spec: CNNSpec) -> None:
        super().__init__()
        c0 = spec.widths[0]
        self.stem = nn.Sequential(
            nn.Conv2d(3, c0, 3, spec.stem_stride, 1), _norm(spec.norm, c0), ACTIVATIONS[spec.activation]()
        )
        blocks, c_in = [], c0
        for stage, (depth, width) in enumerate(zip(spec.depths, spec.widths)):
            for i in range(depth):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(CNNBlock(spec, c_in, width, stride))
                c_in = width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, spec.num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


# --- MLP family ------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, spec: MLPSpec) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = spec.in_features
        for width in spec.hidden:
            layers.append(nn.Linear(c_in, width, bias=spec.bias))
            if spec.layer_norm:
                layers.append(nn.LayerNorm(width))
            layers.append(ACTIVATIONS[spec.activation]())
            c_in = width
        layers.append(nn.Linear(c_in, spec.out_features, bias=spec.bias))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


# --- NAS-Bench-201 ---------------------------------------------------------------------

class ReLUConvBN(nn.Sequential):
    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int = 1) -> None:
        super().__init__(nn.ReLU(), nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(c_out))


class Zero(nn.Module):
    """The benchmark's ``none`` op: eager PyTorch really computes ``x * 0``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul(0.0)


def _nas201_op(name: str, channels: int) -> nn.Module:
    if name == "none":
        return Zero()
    if name == "skip_connect":
        return nn.Identity()
    if name == "nor_conv_1x1":
        return ReLUConvBN(channels, channels, 1)
    if name == "nor_conv_3x3":
        return ReLUConvBN(channels, channels, 3)
    if name == "avg_pool_3x3":
        return nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
    raise ValueError(f"unknown NAS-Bench-201 op {name!r}; choose from {NAS201_OPS}")


class NAS201Cell(nn.Module):
    def __init__(self, ops: tuple[str, ...], channels: int) -> None:
        super().__init__()
        self.edges = nn.ModuleList(_nas201_op(op, channels) for op in ops)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nodes = [x]
        for j in (1, 2, 3):
            terms = [self.edges[k](nodes[src]) for k, (dst, src) in enumerate(NAS201_EDGES) if dst == j]
            total = terms[0]
            for term in terms[1:]:
                total = total + term
            nodes.append(total)
        return nodes[3]


class ResNetReduction(nn.Module):
    """The benchmark's reduction block between stages: halves H, W and doubles channels."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv_a = ReLUConvBN(c_in, c_out, 3, stride=2)
        self.conv_b = ReLUConvBN(c_out, c_out, 3)
        self.shortcut = nn.Sequential(nn.AvgPool2d(2, 2), nn.Conv2d(c_in, c_out, 1, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_b(self.conv_a(x)) + self.shortcut(x)


class NAS201Net(nn.Module):
    def __init__(self, spec: NAS201Spec) -> None:
        super().__init__()
        c = spec.channels
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))
        layers: list[nn.Module] = []
        for stage in range(3):
            if stage > 0:
                layers.append(ResNetReduction(c, 2 * c))
                c *= 2
            layers.extend(NAS201Cell(spec.ops, c) for _ in range(spec.cells_per_stage))
        self.cells = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, spec.num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.cells(self.stem(x)))


# --- DARTS cells ------------------------------------------------------------------------

class SepConv(nn.Sequential):
    def __init__(self, channels: int, kernel: int) -> None:
        pad = kernel // 2
        super().__init__(
            nn.ReLU(), nn.Conv2d(channels, channels, kernel, 1, pad, groups=channels, bias=False),
            nn.Conv2d(channels, channels, 1, bias=False), nn.BatchNorm2d(channels),
            nn.ReLU(), nn.Conv2d(channels, channels, kernel, 1, pad, groups=channels, bias=False),
            nn.Conv2d(channels, channels, 1, bias=False), nn.BatchNorm2d(channels))


class DilConv(nn.Sequential):
    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__(
            nn.ReLU(), nn.Conv2d(channels, channels, kernel, 1, kernel - 1, dilation=2, groups=channels, bias=False),
            nn.Conv2d(channels, channels, 1, bias=False), nn.BatchNorm2d(channels))


def _darts_op(name: str, channels: int) -> nn.Module:
    if name.startswith("sep_conv_"):
        return SepConv(channels, int(name[-1]))
    if name.startswith("dil_conv_"):
        return DilConv(channels, int(name[-1]))
    if name == "max_pool_3x3":
        return nn.MaxPool2d(3, 1, 1)
    if name == "avg_pool_3x3":
        return nn.AvgPool2d(3, 1, 1, count_include_pad=False)
    if name == "skip_connect":
        return nn.Identity()
    raise ValueError(f"unknown DARTS op {name!r}; choose from {DARTS_OPS}")


class DARTSCell(nn.Module):
    def __init__(self, genotype: tuple[tuple[str, int], ...], channels: int) -> None:
        super().__init__()
        self.pre0 = ReLUConvBN(channels, channels, 1)
        self.pre1 = ReLUConvBN(channels, channels, 1)
        self.inputs = [index for _, index in genotype]
        self.ops = nn.ModuleList(_darts_op(op, channels) for op, _ in genotype)
        self.project = nn.Conv2d(4 * channels, channels, 1, bias=False)

    def forward(self, s0: torch.Tensor, s1: torch.Tensor) -> torch.Tensor:
        states = [self.pre0(s0), self.pre1(s1)]
        for node in range(4):
            a, b = 2 * node, 2 * node + 1
            states.append(self.ops[a](states[self.inputs[a]]) + self.ops[b](states[self.inputs[b]]))
        return self.project(torch.cat(states[2:], dim=1))


class DARTSNet(nn.Module):
    def __init__(self, spec: DARTSSpec) -> None:
        super().__init__()
        c = spec.channels
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))
        self.cells = nn.ModuleList(DARTSCell(spec.genotype, c) for _ in range(spec.cells))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, spec.num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s0 = s1 = self.stem(x)
        for cell in self.cells:
            s0, s1 = s1, cell(s0, s1)
        return self.head(s1)


# --- random DAGs -----------------------------------------------------------------------

class DAGOp(nn.Module):
    def __init__(self, op: str, channels: int) -> None:
        super().__init__()
        self.op = op
        c = channels
        factories: dict[str, Callable[[], nn.Module]] = {
            "conv3x3": lambda: nn.Conv2d(c, c, 3, padding=1),
            "conv1x1": lambda: nn.Conv2d(c, c, 1),
            "conv5x5": lambda: nn.Conv2d(c, c, 5, padding=2),
            "dwconv3x3": lambda: nn.Conv2d(c, c, 3, padding=1, groups=c),
            "bn_relu": lambda: nn.Sequential(nn.BatchNorm2d(c), nn.ReLU()),
            "maxpool3x3": lambda: nn.MaxPool2d(3, 1, 1),
            "avgpool3x3": lambda: nn.AvgPool2d(3, 1, 1),
            "gelu": nn.GELU,
            "add": nn.Identity,
            "mul_sigmoid": nn.Sigmoid,
            "concat_conv1x1": lambda: nn.Conv2d(2 * c, c, 1),
        }
        if op not in factories:
            raise ValueError(f"unknown DAG op {op!r}; choose from {UNARY_OPS + BINARY_OPS}")
        self.layer = factories[op]()

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        if self.op == "add":
            return xs[0] + xs[1]
        if self.op == "mul_sigmoid":  # a gate: x * sigmoid(y)
            return xs[0] * self.layer(xs[1])
        if self.op == "concat_conv1x1":
            return self.layer(torch.cat(xs, dim=1))
        return self.layer(xs[0])


class RandDAG(nn.Module):
    def __init__(self, spec: RandDAGSpec) -> None:
        super().__init__()
        c = spec.channels
        self.spec = spec
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, spec.stem_stride, 1), nn.BatchNorm2d(c), nn.ReLU())
        self.ops = nn.ModuleList(DAGOp(node.op, c) for node in spec.nodes)
        used = {j for node in spec.nodes for j in node.inputs}
        self.sinks = [i for i in range(1, len(spec.nodes) + 1) if i not in used]
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, spec.num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs = [self.stem(x)]
        for node, op in zip(self.spec.nodes, self.ops):
            outputs.append(op(*(outputs[j] for j in node.inputs)))
        total = outputs[self.sinks[0]]
        for i in self.sinks[1:]:
            total = total + outputs[i]
        return self.head(total)
