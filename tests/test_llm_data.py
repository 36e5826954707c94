"""lilou.data.llm_energy on the real llm_energy mirror: which rows come out and what each field holds."""
from __future__ import annotations

from collections import Counter

import pytest

from lilou.data.llm_energy import serving_runs


@pytest.fixture(scope="module")
def runs(datasets_dir):
    return serving_runs(datasets_dir)


def test_rows_per_source_and_gpu(runs):
    counts = Counter((r.source, r.gpu) for r in runs)
    assert counts[("mlenergy_v1_2023", "a40")] == 92          # 23 models x 4 tasks
    assert counts[("mlenergy_v2_2024", "a100-sxm4-40gb")] == 146  # text suites, PP = 1
    assert all(r.held_back == r.gpu.startswith("h100") for r in runs)
    assert {r.task for r in runs if r.source == "mlenergy_v3_2025"} == {"lm-arena-chat", "sourcegraph-fim"}


def test_argonne_ttft_row_and_derived_itl(runs):
    row = next(r for r in runs if r.task == "ttft-itl" and r.gpu == "a100-sxm4-40gb"
               and r.model == "meta-llama/Llama-2-7b-hf")
    assert row.ttft_ms == pytest.approx(1029.996186029166)
    assert row.itl_ms == pytest.approx((25050.500875338912 - 1029.996186029166) / 1023)
    assert (row.batch, row.input_len, row.engine, row.dtype) == (16, 1024, "vllm", "fp16")


def test_argonne_power_is_watts_and_keeps_the_idle_window(runs):
    row = next(r for r in runs if r.task == "power" and r.gpu == "a100-sxm4-40gb" and r.engine == "vllm"
               and r.model == "meta-llama/Llama-2-7b-hf" and r.batch == 16)
    assert row.power_w == pytest.approx(292.97344)
    assert row.power_window == "batch+2s-idle" and row.e2e_ms == pytest.approx(25050.500875338912)


def test_context_2048_models_lose_their_2048_token_rows(runs):
    aquila = [r for r in runs if r.model == "BAAI/Aquila-7B" and r.task == "static-batch"]
    assert aquila and max(r.input_len for r in aquila) == 1024


def test_mlenergy_batch_is_the_mean_running_batch(runs):
    row = next(r for r in runs if r.source == "mlenergy_v2_2024" and r.model == "google/gemma-2-27b-it"
               and r.config == "max_num_seqs=32,tp=2" and r.task == "chat")
    assert row.batch == pytest.approx(31.92714819427148)          # Avg BS, not max_num_seqs
    assert row.itl_ms == pytest.approx(63.244371990853644)          # Avg TPOT (s) x 1000, engine side
    assert row.power_w == pytest.approx(231.08555738003656) and row.input_assumed


def test_mlenergy_v3_itl_is_the_steady_state_time_per_token(runs):
    """v3's steady state: mean running batch / output throughput (the client median pools ramp-up and drain)."""
    row = next(r for r in runs if r.source == "mlenergy_v3_2025" and r.model == "Qwen/Qwen3-14B"
               and r.config == "max_num_seqs=64,tp=1" and r.task == "lm-arena-chat" and r.gpu == "b200")
    assert row.itl_kind == "steady-derived" and row.steady
    assert row.itl_ms == pytest.approx(1000 * 63.75912408759124 / 4176.121465838442)   # 15.27 ms, median 12.73
    assert row.batch == pytest.approx(63.75912408759124) and row.power_w == pytest.approx(696.9625164938583)
