"""One ``Predictor`` shared by threads, in a program that loaded numpy (and OpenBLAS's worker threads) before Lilou.

OpenBLAS with its worker threads on hung when several threads called it: six threads sharing a Predictor stopped
in the fusion GNN's first layer (found by a user-level test, session 36). ``lilou.blas.blas_section`` runs each
batch of products one at a time on one BLAS thread, and gives the program its own setting back after.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_LIMITS = """
import json, numpy
from threadpoolctl import threadpool_info
from lilou.blas import blas_section

def threads():
    return sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})

before = threads()
with blas_section():
    inside = threads()
print(json.dumps([before, inside, threads()]))
"""

_SHARED = """
import concurrent.futures as futures, json, numpy
from lilou import Predictor

predictor = Predictor()
cases = [(model, gpu) for model in ("examples/resnet18.onnx", "tests/data/ort/bert.onnx") for gpu in ("a10g", "t4", "h100-sxm")]
alone = [predictor.predict(model, gpu=gpu).latency_ms for model, gpu in cases]
with futures.ThreadPoolExecutor(6) as pool:
    shared = list(pool.map(lambda case: predictor.predict(case[0], gpu=case[1]).latency_ms, cases * 2))
print(json.dumps([alone, shared]))
"""


def _run(code: str) -> list:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}  # OpenBLAS's pool on, as a program of the user's has it
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_blas_section_runs_one_thread_and_gives_the_setting_back():
    before, inside, after = _run(_LIMITS)
    assert (before, inside, after) == ([2], [1], [2])


def test_one_predictor_shared_by_threads_gives_the_single_thread_results():
    alone, shared = _run(_SHARED)
    assert shared == alone * 2
