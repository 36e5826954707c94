"""`lilou gpus`: the table, the JSON contract, and bad input (exit 2, one line on stderr)."""
from __future__ import annotations

import json

from lilou.cli import main
from lilou.hardware import all_gpus


def test_table_lists_every_gpu_with_its_mig_profiles(capsys):
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert f"{len(all_gpus())} GPUs" in out
    for header in ("name", "arch", "SMs", "clock MHz", "memory GB", "GB/s", "L2 MB",
                   "FP32 TFLOPS", "FP16 tensor TFLOPS", "MIG profiles"):
        assert header in out
    for gpu in all_gpus():
        assert gpu.name in out
    assert "1g.5gb, 1g.5gb+me, 1g.10gb" in out


def test_json_is_the_database_with_mig_profiles(capsys):
    assert main(["gpus", "--format", "json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert entries == [gpu.to_dict() for gpu in all_gpus()]
    h100 = next(entry for entry in entries if entry["name"] == "h100-sxm")
    assert [profile["name"] for profile in h100["mig_profiles"]] == [
        "1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    assert h100["mig_profiles"][-1]["sms"] == 132


def test_names_select_gpus_by_any_spelling(capsys):
    assert main(["gpus", "NVIDIA A10G", "Tesla T4", "--format", "json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [entry["name"] for entry in entries] == ["a10g", "t4"]
    assert entries[0]["mig_profiles"] == []


def test_unknown_gpu_exits_2_with_one_line_on_stderr(capsys):
    assert main(["gpus", "a10x"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "lilou: error: unknown GPU 'a10x'; did you mean: a10, a100, a10g?\n"


def test_unknown_format_exits_2(capsys):
    assert main(["gpus", "--format", "yaml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lilou: error:") and "--format" in err and err.count("\n") == 1
