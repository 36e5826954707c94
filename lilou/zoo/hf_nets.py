"""The ``nn.Module`` side of :mod:`lilou.zoo.hf`: wrappers around transformers models, static Switch experts."""
from __future__ import annotations

import torch
from torch import nn


# --- wrappers: plain tensors in, one tensor out ------------------------------------------


class ImageModel(nn.Module):
    """``pixel_values`` [batch, 3, H, W] -> one output tensor of a transformers vision model."""

    def __init__(self, model: nn.Module, output: str) -> None:
        super().__init__()
        self.model = model
        self.output = output

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(pixel_values=pixel_values, return_dict=True), self.output)


class TextModel(nn.Module):
    """``input_ids`` int64 [batch, seq] -> one output tensor. No attention mask: every token is real."""

    def __init__(self, model: nn.Module, output: str) -> None:
        super().__init__()
        self.model = model
        self.output = output

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(input_ids=input_ids, return_dict=True), self.output)


class Seq2SeqModel(nn.Module):
    """Encoder-decoder: ``input_ids`` and ``decoder_input_ids`` -> one output tensor.

    The encoder's all-ones attention mask is made inside the graph: some encoders
    (Switch Transformers) index it unconditionally while being traced.
    """

    def __init__(self, model: nn.Module, output: str) -> None:
        super().__init__()
        self.model = model
        self.output = output

    def forward(self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        out = self.model(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            decoder_input_ids=decoder_input_ids,
            return_dict=True,
        )
        return getattr(out, self.output)


class EncoderOnly(nn.Module):
    """The encoder half of an encoder-decoder model (e.g. BART), ``input_ids`` -> last hidden state."""

    def __init__(self, model: nn.Module, output: str) -> None:
        super().__init__()
        self.encoder = model.get_encoder()
        self.output = output

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return getattr(self.encoder(input_ids=input_ids, return_dict=True), self.output)


WRAPPERS: dict[tuple[str, ...], type[nn.Module]] = {
    ("pixel_values",): ImageModel,
    ("input_ids",): TextModel,
    ("input_ids", "decoder_input_ids"): Seq2SeqModel,
}


# --- Switch Transformers: static-shape expert dispatch ----------------------------------


class CapacitySparseMLP(nn.Module):
    """Static-shape stand-in for ``SwitchTransformersSparseMLP`` (same parameters, same names).

    The transformers version loops over ``nonzero()`` of the routing mask, which
    ``torch.export`` cannot trace (data-dependent shapes). Here each expert takes the
    first ``capacity`` tokens routed to it in each sequence (the router drops tokens
    beyond the capacity anyway), so every expert GEMM has shape [batch * capacity,
    d_model]: what eager runs when experts are full, as they are for a near-uniform
    router. Unused slots get weight 0. The routing is the top-1 router of
    transformers, inlined because its ``self.classifier.to(dtype)`` cannot run on
    fake (weight-free) parameters.
    """

    def __init__(self, sparse_mlp: nn.Module, capacity: int) -> None:
        super().__init__()
        self.router = sparse_mlp.router
        self.experts = sparse_mlp.experts
        self.capacity = capacity

    def _route(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One-hot dispatch [B, S, E] (over-capacity tokens dropped) and the chosen expert's probability [B, S, 1]."""
        probs = torch.softmax(self.router.classifier(hidden_states), dim=-1)
        dispatch = nn.functional.one_hot(probs.argmax(dim=-1), num_classes=probs.shape[-1])
        dispatch = dispatch * (dispatch.cumsum(dim=-2) <= self.capacity)
        return dispatch, probs.max(dim=-1, keepdim=True).values

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = hidden_states.shape
        dispatch, weights = self._route(hidden_states)
        capacity = min(self.capacity, seq)
        # Routed tokens first, earlier tokens before later ones (the router's priority order).
        order = torch.arange(seq, 0, -1, device=hidden_states.device, dtype=hidden_states.dtype)
        out = torch.zeros_like(hidden_states)
        for e in range(dispatch.shape[-1]):
            mask = dispatch[..., e].to(hidden_states.dtype)  # [B, S]
            _, slots = torch.topk(mask * (seq + 1) + order, capacity, dim=1)  # [B, C]
            index = slots.unsqueeze(-1).expand(batch, capacity, dim)
            tokens = hidden_states.gather(1, index)
            scale = weights.gather(1, slots.unsqueeze(-1)) * mask.gather(1, slots).unsqueeze(-1)
            out = out.scatter_add(1, index, self.experts[f"expert_{e}"](tokens) * scale)
        return out


def static_switch_experts(model: nn.Module) -> None:
    """Swap every ``SwitchTransformersSparseMLP`` of ``model`` for a :class:`CapacitySparseMLP`."""
    from transformers.models.switch_transformers import modeling_switch_transformers as sw

    capacity = model.config.expert_capacity
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, sw.SwitchTransformersSparseMLP):
                setattr(parent, child_name, CapacitySparseMLP(child, capacity))
