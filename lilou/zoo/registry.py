"""Building zoo models: ``build(name)`` -> a ready-to-export module (needs torch: the ``zoo`` extra).

The names and their entries are :mod:`lilou.zoo.catalogue`'s.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lilou.errors import LilouInputError
from lilou.zoo import decomp_nets, generator_nets, generators, hf
from lilou.zoo.catalogue import GENERATORS, ZooEntry, get_entry, parse_generator


@dataclass(frozen=True)
class BuiltModel:
    """A module in eval mode with example inputs, ready for ``torch.onnx.export``.

    ``fake`` means the parameters are FakeTensors: shapes and dtypes only, no memory,
    so the module can be exported (weight-free) but not run on real data.
    """

    name: str
    module: nn.Module
    args: tuple[torch.Tensor, ...]
    input_names: tuple[str, ...]
    output_name: str
    fake: bool = False

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


#: generator family (:data:`lilou.zoo.catalogue.GENERATORS`) -> the module of a spec.
_NETS: dict[str, Callable[[Any], nn.Module]] = {
    "cnn": generator_nets.CNN,
    "mlp": generator_nets.MLP,
    "nas201": generator_nets.NAS201Net,
    "darts": generator_nets.DARTSNet,
    "randdag": generator_nets.RandDAG,
}


@contextlib.contextmanager
def fake_parameters() -> Iterator[None]:
    """Build modules whose parameters are FakeTensors: right shape and dtype, no memory.

    Only parameters are faked (by intercepting ``nn.Module.register_parameter``);
    buffers and every other tensor a constructor makes stay real, so code that
    computes in ``__init__`` (``torch.linspace(...).tolist()``) still works and small
    buffers keep their values. transformers' weight initialisation is skipped: it is
    pointless on fake tensors and some of it (``trunc_normal_``) reads values.
    Weight tying still happens. This is how a 13B-parameter GPT is exported with
    well under a GB of memory. The patch is process-wide while active: not thread-safe.
    """
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from transformers import PreTrainedModel

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    register_parameter = nn.Module.register_parameter
    initialize_weights = PreTrainedModel.initialize_weights

    def register_fake_parameter(self: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and not isinstance(param, FakeTensor):
            with mode:
                fake = torch.empty(param.shape, dtype=param.dtype, device=param.device)
            param = nn.Parameter(fake, requires_grad=param.requires_grad)
        register_parameter(self, name, param)

    nn.Module.register_parameter = register_fake_parameter  # type: ignore[method-assign]
    PreTrainedModel.initialize_weights = lambda self: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
        PreTrainedModel.initialize_weights = initialize_weights  # type: ignore[method-assign]


def _positive(option: str, value: int | None) -> None:
    if value is not None and value <= 0:
        raise LilouInputError(f"{option} must be a positive integer, got {value}")


def _check_shape_options(entry: ZooEntry, seq: int | None, image_size: int | None,
                         overrides: dict[str, Any]) -> None:
    _positive("--seq", seq)
    _positive("--image-size", image_size)
    if seq is not None and entry.seq is None:
        raise LilouInputError(f"{entry.name} does not take a sequence length (--seq); it is not a text model")
    if image_size is not None and entry.image_size is None:
        raise LilouInputError(f"{entry.name} does not take an image size (--image-size)")
    if seq is not None and entry.name in hf.SPECS:
        limit = hf.max_positions(entry.name, overrides)
        if limit is not None and seq > limit:
            raise LilouInputError(f"{entry.name} supports sequences up to {limit} tokens, got --seq {seq}")


def _build_hf(entry: ZooEntry, batch: int, seq: int | None, image_size: int | None,
              overrides: dict[str, Any]) -> BuiltModel:
    spec = hf.SPECS[entry.name]
    if spec.kind == "vision":
        size = image_size or entry.image_size
        if "image_size" in spec.config:  # models with position embeddings sized for the image
            overrides = {"image_size": size, **overrides}
        module = hf.build_hf(entry.name, overrides)
        args: tuple[torch.Tensor, ...] = (torch.zeros(batch, 3, size, size),)
    else:
        module = hf.build_hf(entry.name, overrides)
        shape = (batch, seq or entry.seq or 1)
        args = tuple(torch.zeros(shape, dtype=torch.long) for _ in spec.inputs)
    return BuiltModel(entry.name, module, args, spec.inputs, spec.output)


def _build_generator(entry: ZooEntry, batch: int, image_size: int | None, overrides: dict[str, Any]) -> BuiltModel:
    family, seed = parse_generator(entry.name)  # type: ignore[misc]
    sample, make = GENERATORS[family][0], _NETS[family]
    if image_size is not None:
        overrides = {**overrides, "image_size": image_size}
    try:
        spec = dataclasses.replace(sample(seed), **overrides)
    except TypeError as exc:
        raise LilouInputError(f"bad override for {entry.name}: {exc}") from None
    module = make(spec).eval()
    if isinstance(spec, generators.MLPSpec):
        tokens = (spec.tokens,) if spec.tokens else ()
        args: tuple[torch.Tensor, ...] = (torch.zeros(batch, *tokens, spec.in_features),)
    else:
        args = (torch.zeros(batch, 3, spec.image_size, spec.image_size),)
    return BuiltModel(entry.name, module, args, ("x",), "output")


def build(name: str, batch: int | None = None, seq: int | None = None, image_size: int | None = None,
          *, fake: bool = False, **overrides: Any) -> BuiltModel:
    """Build zoo model ``name`` (random weights, eval mode) with example inputs.

    ``batch`` / ``seq`` / ``image_size`` default to the entry's values. ``overrides``
    change the architecture: transformers config fields for catalogue models
    (``build("gpt2", n_layer=2)``), spec fields for generators (``build("cnn-3", kernel=5)``).
    ``fake=True`` builds with weight-free FakeTensor parameters (see :func:`fake_parameters`).
    Weights are drawn from a fixed seed, so a build is reproducible.
    """
    entry = get_entry(name)
    _positive("--batch", batch)
    _check_shape_options(entry, seq, image_size, overrides)
    requested_batch = batch
    batch = batch or entry.batch
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.random.fork_rng(devices=[]))
        torch.manual_seed(0)
        if fake:
            stack.enter_context(fake_parameters())
        if entry.family == "decomp":
            if image_size is not None or seq is not None or overrides:
                raise LilouInputError(f"{name} is a decomposition-corpus entry: it takes --batch only")
            module, args = decomp_nets.build_entry(name, requested_batch)
            built = BuiltModel(name, module, args, ("x",), "output")
        elif entry.kind == "generator":
            built = _build_generator(entry, batch, image_size, overrides)
        else:
            built = _build_hf(entry, batch, seq, image_size, overrides)
    return dataclasses.replace(built, fake=fake)


def parameter_count(name: str, **overrides: Any) -> int:
    """Number of parameters of ``name`` (counted on a weight-free build: fast even for 13B models)."""
    return build(name, fake=True, **overrides).num_parameters
