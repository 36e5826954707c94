"""Hugging Face ``transformers`` architectures built from configs (random weights, no downloads).

Every model is wrapped in a tiny ``nn.Module`` that takes plain tensors and returns
exactly one tensor (logits or the last hidden state), so the exported ONNX graph has
one output and no cache / tuple plumbing.

Attention is built with ``attn_implementation="eager"``: the exported graph then has
explicit MatMul / Softmax nodes instead of one fused SDPA call. This matches how
NeuSight measured its latencies (PyTorch eager, fp32), which are our labels.

The NeuSight configs (``/work/shared/datasets/neusight/model_configs/*.json`` from
sitar-lab/NeuSight @ 6945927) are copied below with only the fields that shape the
network, so the package does not depend on the dataset being present.

The ``nn.Module`` wrappers are in :mod:`lilou.zoo.hf_nets`: this module is data and
imports neither torch nor transformers until a model is built.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class HFSpec:
    """How to build one transformers model.

    ``config_class`` / ``model_class`` are attribute names in ``transformers``;
    ``output`` is the field of the model output that the wrapper returns;
    ``inputs`` are the tensor inputs the wrapper's forward takes, in order.
    """

    config_class: str
    model_class: str
    config: Mapping[str, Any]
    output: str
    inputs: tuple[str, ...]
    # Applied to the built transformers model (e.g. to swap a module that torch.export cannot trace).
    patch: Callable[[nn.Module], None] | None = field(default=None, compare=False)

    @property
    def kind(self) -> str:
        return "vision" if self.inputs == ("pixel_values",) else "text"


def _static_switch_experts(model: nn.Module) -> None:
    """Swap Switch Transformers' sparse MLPs for static-shape ones (:mod:`lilou.zoo.hf_nets`)."""
    from lilou.zoo.hf_nets import static_switch_experts

    static_switch_experts(model)


# --- the specs ---------------------------------------------------------------------------

_IMAGE = ("pixel_values",)
_TEXT = ("input_ids",)
_IMAGENET = {"num_labels": 1000}

_GPT2_NEUSIGHT = {"activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "vocab_size": 50257}
_OPT_NEUSIGHT = {
    "activation_function": "relu",
    "do_layer_norm_before": True,
    "max_position_embeddings": 2048,
    "vocab_size": 50272,
    "word_embed_proj_dim": 2048,
    "pad_token_id": 1,
}
_BERT_NEUSIGHT = {
    "hidden_act": "gelu",
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "vocab_size": 30522,
    "is_decoder": True,  # BertLMHeadModel is meant to run as a decoder
}


def _gpt(n_embd: int, n_head: int, n_layer: int, n_positions: int) -> HFSpec:
    cfg = {**_GPT2_NEUSIGHT, "n_embd": n_embd, "n_head": n_head, "n_layer": n_layer, "n_positions": n_positions}
    return HFSpec("GPT2Config", "GPT2LMHeadModel", cfg, "logits", _TEXT)


SPECS: dict[str, HFSpec] = {
    # Vision (ImageNet heads, 1000 classes) ----------------------------------------------
    "resnet18": HFSpec(
        "ResNetConfig", "ResNetForImageClassification",
        {"layer_type": "basic", "depths": [2, 2, 2, 2], "hidden_sizes": [64, 128, 256, 512], **_IMAGENET},
        "logits", _IMAGE),
    "resnet50": HFSpec(
        "ResNetConfig", "ResNetForImageClassification",
        {"layer_type": "bottleneck", "depths": [3, 4, 6, 3], "hidden_sizes": [256, 512, 1024, 2048],
         "downsample_in_bottleneck": False, **_IMAGENET},
        "logits", _IMAGE),
    "convnext-tiny": HFSpec(
        "ConvNextConfig", "ConvNextForImageClassification",
        {"depths": [3, 3, 9, 3], "hidden_sizes": [96, 192, 384, 768], **_IMAGENET}, "logits", _IMAGE),
    "mobilenetv2": HFSpec(
        "MobileNetV2Config", "MobileNetV2ForImageClassification",
        {"depth_multiplier": 1.0, "tf_padding": False, **_IMAGENET}, "logits", _IMAGE),
    "efficientnet-b0": HFSpec(
        "EfficientNetConfig", "EfficientNetForImageClassification",
        {"width_coefficient": 1.0, "depth_coefficient": 1.0, "image_size": 224, "hidden_dim": 1280,
         "dropout_rate": 0.2, **_IMAGENET},
        "logits", _IMAGE),
    "regnety-400mf": HFSpec(
        "RegNetConfig", "RegNetForImageClassification",
        {"embedding_size": 32, "hidden_sizes": [48, 104, 208, 440], "depths": [1, 3, 6, 6],
         "groups_width": 8, "layer_type": "y", **_IMAGENET},
        "logits", _IMAGE),
    "vit-b16": HFSpec(
        "ViTConfig", "ViTForImageClassification",
        {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
         "patch_size": 16, "image_size": 224, **_IMAGENET},
        "logits", _IMAGE),
    "swin-tiny": HFSpec(
        "SwinConfig", "SwinForImageClassification",
        {"embed_dim": 96, "depths": [2, 2, 6, 2], "num_heads": [3, 6, 12, 24], "window_size": 7,
         "patch_size": 4, "image_size": 224, **_IMAGENET},
        "logits", _IMAGE),
    "deit-small": HFSpec(
        "DeiTConfig", "DeiTForImageClassification",
        {"hidden_size": 384, "num_hidden_layers": 12, "num_attention_heads": 6, "intermediate_size": 1536,
         "patch_size": 16, "image_size": 224, **_IMAGENET},
        "logits", _IMAGE),
    # Text -------------------------------------------------------------------------------
    "bert-base": HFSpec("BertConfig", "BertModel", {}, "last_hidden_state", _TEXT),
    "bert-large": HFSpec(
        "BertConfig", "BertModel",
        {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096},
        "last_hidden_state", _TEXT),
    "gpt2": HFSpec("GPT2Config", "GPT2LMHeadModel", {}, "logits", _TEXT),
    "opt-125m": HFSpec(
        "OPTConfig", "OPTForCausalLM",
        {"hidden_size": 768, "num_hidden_layers": 12, "ffn_dim": 3072, "num_attention_heads": 12,
         "word_embed_proj_dim": 768, "max_position_embeddings": 2048, "vocab_size": 50272},
        "logits", _TEXT),
    "t5-base-encoder": HFSpec(
        "T5Config", "T5EncoderModel",
        {"d_model": 768, "d_ff": 3072, "d_kv": 64, "num_heads": 12, "num_layers": 12, "vocab_size": 32128},
        "last_hidden_state", _TEXT),
    "bart-base-encoder": HFSpec(
        "BartConfig", "BartModel",
        {"d_model": 768, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 12,
         "decoder_attention_heads": 12, "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072,
         "max_position_embeddings": 1024, "vocab_size": 50265},
        "last_hidden_state", _TEXT),
    "roberta-base": HFSpec("RobertaConfig", "RobertaModel", {"vocab_size": 50265, "max_position_embeddings": 514,
                                                             "type_vocab_size": 1, "pad_token_id": 1},
                           "last_hidden_state", _TEXT),
    "distilbert-base": HFSpec("DistilBertConfig", "DistilBertModel", {}, "last_hidden_state", _TEXT),
    "albert-base": HFSpec("AlbertConfig", "AlbertModel",
                          {"embedding_size": 128, "hidden_size": 768, "num_hidden_layers": 12,
                           "num_attention_heads": 12, "intermediate_size": 3072}, "last_hidden_state", _TEXT),
    "electra-small": HFSpec("ElectraConfig", "ElectraModel",
                            {"embedding_size": 128, "hidden_size": 256, "num_hidden_layers": 12,
                             "num_attention_heads": 4, "intermediate_size": 1024}, "last_hidden_state", _TEXT),
    "gpt-neo-125m": HFSpec("GPTNeoConfig", "GPTNeoForCausalLM",
                           {"hidden_size": 768, "num_layers": 12, "num_heads": 12,
                            "attention_types": [[["global", "local"], 6]], "max_position_embeddings": 2048},
                           "logits", _TEXT),
    "tinyllama-1.1b": HFSpec("LlamaConfig", "LlamaForCausalLM",
                             {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
                              "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
                              "max_position_embeddings": 2048}, "logits", _TEXT),
    "bloom-560m": HFSpec("BloomConfig", "BloomForCausalLM",
                         {"hidden_size": 1024, "n_layer": 24, "n_head": 16, "vocab_size": 250880}, "logits", _TEXT),
    "mobilevit-small": HFSpec("MobileViTConfig", "MobileViTForImageClassification",
                              {"image_size": 256, **_IMAGENET}, "logits", _IMAGE),
    "dinov2-small": HFSpec("Dinov2Config", "Dinov2Model",
                           {"hidden_size": 384, "num_hidden_layers": 12, "num_attention_heads": 6,
                            "patch_size": 14, "image_size": 224}, "last_hidden_state", _IMAGE),
    "beit-base": HFSpec("BeitConfig", "BeitForImageClassification",
                        {"use_relative_position_bias": True, "image_size": 224, **_IMAGENET}, "logits", _IMAGE),
    "poolformer-s12": HFSpec("PoolFormerConfig", "PoolFormerForImageClassification",
                             {"depths": [2, 2, 6, 2], "hidden_sizes": [64, 128, 320, 512], **_IMAGENET},
                             "logits", _IMAGE),
    "segformer-b0": HFSpec("SegformerConfig", "SegformerForSemanticSegmentation",
                           {"depths": [2, 2, 2, 2], "hidden_sizes": [32, 64, 160, 256],
                            "decoder_hidden_size": 256, "num_labels": 150}, "logits", _IMAGE),
    # NeuSight model_configs/*.json (names are the file stems used in its latency data) --
    "bert": HFSpec(
        "BertConfig", "BertLMHeadModel",
        {**_BERT_NEUSIGHT, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
         "intermediate_size": 3072},
        "logits", _TEXT),
    "bert_large": HFSpec(
        "BertConfig", "BertLMHeadModel",
        {**_BERT_NEUSIGHT, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
         "intermediate_size": 4096},
        "logits", _TEXT),
    "gpt2_med": _gpt(1024, 16, 24, 1024),
    "gpt2_large": _gpt(1280, 20, 36, 1024),
    "gpt2_xl": _gpt(1600, 25, 48, 1024),
    "gpt3_xl": _gpt(3072, 24, 24, 2048),
    "gpt3_27": _gpt(2560, 32, 32, 2048),
    "gpt3_67": _gpt(4096, 32, 32, 2048),
    "gpt3_13": _gpt(5120, 40, 40, 2048),
    "opt": HFSpec(
        "OPTConfig", "OPTForCausalLM",
        {**_OPT_NEUSIGHT, "hidden_size": 512, "num_hidden_layers": 1, "ffn_dim": 2048, "num_attention_heads": 8},
        "logits", _TEXT),
    "opt_13": HFSpec(
        "OPTConfig", "OPTForCausalLM",
        {**_OPT_NEUSIGHT, "hidden_size": 2048, "num_hidden_layers": 24, "ffn_dim": 8192, "num_attention_heads": 32},
        "logits", _TEXT),
    "switchxl4": HFSpec(
        "SwitchTransformersConfig", "SwitchTransformersForConditionalGeneration",
        {"d_model": 1024, "d_ff": 16384, "d_kv": 128, "num_heads": 32, "num_layers": 24, "num_decoder_layers": 24,
         "num_sparse_encoder_layers": 12, "num_sparse_decoder_layers": 12, "encoder_sparse_step": 2,
         "decoder_sparse_step": 2, "num_experts": 4, "expert_capacity": 64, "feed_forward_proj": "relu",
         "dense_act_fn": "relu", "is_gated_act": False, "router_bias": False, "router_jitter_noise": 0.01,
         "layer_norm_epsilon": 1e-6, "relative_attention_num_buckets": 32,
         "relative_attention_max_distance": 128, "vocab_size": 32128},
        "logits", ("input_ids", "decoder_input_ids"), patch=_static_switch_experts),
}

# Encoder-only views of encoder-decoder checkpoints.
_ENCODER_ONLY = {"bart-base-encoder"}


def make_config(name: str, overrides: Mapping[str, Any] | None = None) -> Any:
    """The transformers config of ``name`` (eager attention, no KV cache), with ``overrides`` applied."""
    import transformers

    spec = SPECS[name]
    config_class = getattr(transformers, spec.config_class)
    kwargs = {**spec.config, **(overrides or {})}
    config = config_class(**kwargs, attn_implementation="eager", use_cache=False)
    config._attn_implementation = "eager"  # also set on sub-configs (setter propagates)
    return config


def build_hf(name: str, overrides: Mapping[str, Any] | None = None) -> nn.Module:
    """Build the wrapped transformers model ``name`` in eval mode (random init)."""
    import transformers

    from lilou.zoo import hf_nets

    spec = SPECS[name]
    config = make_config(name, overrides)
    model = getattr(transformers, spec.model_class)(config)
    if spec.patch is not None:
        spec.patch(model)
    wrapper = hf_nets.EncoderOnly if name in _ENCODER_ONLY else hf_nets.WRAPPERS[spec.inputs]
    return wrapper(model, spec.output).eval()


def max_positions(name: str, overrides: Mapping[str, Any] | None = None) -> int | None:
    """Longest sequence the model's learned position embeddings allow (None: no fixed limit, e.g. T5)."""
    config = make_config(name, overrides)
    for key in ("n_positions", "max_position_embeddings"):
        if isinstance(getattr(config, key, None), int):
            return getattr(config, key)
    return None
