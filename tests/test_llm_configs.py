"""Hugging Face config.json spellings of families beyond Llama's (each case a config the user review found misread)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lilou.errors import LilouInputError
from lilou.llm.config import load_config
from lilou.llm.memory import kv_bytes_per_token

#: bigcode/starcoder's config.json, the fields Lilou reads.
STARCODER = {"architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode", "multi_query": True,
             "n_embd": 6144, "n_head": 48, "n_inner": 24576, "n_layer": 40, "n_positions": 8192, "vocab_size": 49152}


def _write(folder: Path, config: dict, name: str = "config.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(config))
    return path


def test_gpt_bigcode_multi_query_is_one_kv_head(tmp_path):
    """StarCoder's multi_query was read only under Falcon's model type: 48 KV heads, KV cache 48x too big, weights
    34.3 GiB (15.5 B parameters: 28.9 GiB)."""
    config = load_config(_write(tmp_path / "starcoder", STARCODER))
    assert (config.kv_heads, config.head_dim, config.tied_embeddings) == (1, 128, True)
    per_layer = 6144 * (6144 + 2 * 128) + 6144 * 6144 + 2 * 6144 * 24576  # c_attn, c_proj, MLP
    assert config.total_parameters == 40 * per_layer + 49152 * 6144 + (2 * 40 + 1) * 6144  # the head is tied
    assert kv_bytes_per_token(config, "bf16", 1) == 40 * 2 * 1 * 128 * 2
    # GPTBigCodeConfig's default is multi_query true; false is a KV head per query head
    assert load_config(_write(tmp_path / "sc", {**STARCODER, "multi_query": None})).kv_heads == 1
    assert load_config(_write(tmp_path / "mha", {**STARCODER, "multi_query": False})).kv_heads == 48
    with pytest.raises(LilouInputError, match=r"multi_query is 'yes', not true or false"):
        load_config(_write(tmp_path / "bad", {**STARCODER, "multi_query": "yes"}))
