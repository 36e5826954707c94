"""`lilou gpus`: the table, the JSON contract, and bad input (exit 2, one line on stderr)."""
from __future__ import annotations

import json

from lilou.cli import main
from lilou.hardware import all_gpus


def test_table_lists_every_gpu_with_its_mig_profiles(capsys):
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert f"{len(all_gpus())} GPUs" in out
    for header in ("name", "arch", "CC", "SMs", "clock MHz", "memory GB", "memory", "GB/s", "L2 MB",
                   "FP32", "FP16 TC", "BF16 TC", "FP8 TC", "MIG", "MIG profiles"):
        assert header in out
    assert "dense peak TFLOPS" in out and "FP32 accumulate" in out
    for gpu in all_gpus():
        assert gpu.name in out
    assert "1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb" in out
    assert max(len(line) for line in out.splitlines()) <= 160  # fits the piped console, nothing wrapped


def test_table_rows_show_the_new_key_figures(capsys):
    assert main(["gpus", "b200", "rtx-4090", "m40"]) == 0
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
            for line in capsys.readouterr().out.splitlines() if line.startswith("│")}
    #          arch,  CC,  SMs, clock, GB, memory, GB/s, L2, FP32, FP16 TC, BF16 TC, FP8 TC, MIG
    assert rows["b200"] == ["Blackwell", "10.0", "148", "1965", "180", "HBM3e", "7700", "126.5", "75",
                            "2250", "2250", "4500", "unlisted"]  # runs MIG; profiles not here
    assert rows["rtx-4090"][5:] == ["GDDR6X", "1008", "72", "82.6", "165.2", "165.2", "330.3", "-"]
    assert rows["m40-24gb"][:2] == ["Maxwell", "5.2"] and rows["m40-24gb"][9:12] == ["-", "-", "-"]


def test_json_is_the_database_with_mig_profiles(capsys):
    assert main(["gpus", "--format", "json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert entries == [gpu.to_dict() for gpu in all_gpus()]
    h100 = next(entry for entry in entries if entry["name"] == "h100-sxm")
    assert [profile["name"] for profile in h100["mig_profiles"]] == [
        "1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    assert h100["mig_profiles"][-1]["sms"] == 132
    for entry in entries:
        assert set(entry["peak_tflops"]) == {
            "fp64", "fp32", "fp16", "bf16", "int8", "tf32_tensor", "fp16_tensor", "bf16_tensor",
            "fp8_tensor", "int8_tensor", "int4_tensor", "fp4_tensor"}
        assert {"memory_type", "fp32_lanes_per_sm", "int32_shares_fp32_datapath",
                "tensor_core_generation"} <= set(entry)
    assert h100["peak_tflops"]["bf16_tensor"] == 989.4 and h100["peak_tflops"]["fp8_tensor"] == 1978.9
    assert (h100["memory_type"], h100["fp32_lanes_per_sm"], h100["int32_shares_fp32_datapath"],
            h100["tensor_core_generation"]) == ("HBM3", 128, False, 4)
    a100 = next(entry for entry in entries if entry["name"] == "a100-sxm4-80gb")
    assert {key: a100["peak_tflops"][key] for key in ("fp64", "tf32_tensor", "bf16_tensor", "fp8_tensor")} == {
        "fp64": 9.7, "tf32_tensor": 156, "bf16_tensor": 312, "fp8_tensor": None}


def test_names_select_gpus_by_any_spelling(capsys):
    assert main(["gpus", "NVIDIA A10G", "Tesla T4", "--format", "json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [entry["name"] for entry in entries] == ["a10g", "t4"]
    assert entries[0]["mig_profiles"] == []


def test_dataset_spellings_select_the_new_gpus(capsys):
    assert main(["gpus", "NVIDIA B300 SXM6 AC", "TitanX", "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                 "--format", "json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [entry["name"] for entry in entries] == ["b300", "gtx-titan-x", "rtx-pro-6000-blackwell-server"]
    assert [entry["architecture"] for entry in entries] == ["Blackwell", "Maxwell", "Blackwell"]
    assert entries[1]["fp16_tflops"] is None and entries[1]["peak_tflops"]["fp16"] is None


def test_table_without_mig_gpus_prints_no_mig_table(capsys):
    assert main(["gpus", "t4"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].strip() == "1 GPU" and "MIG profiles" not in out


def test_unknown_gpu_exits_2_with_one_line_on_stderr(capsys):
    assert main(["gpus", "a10x"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "lilou: error: unknown GPU 'a10x'; did you mean: a10, a100, a10g?\n"


def test_unknown_format_exits_2(capsys):
    assert main(["gpus", "--format", "yaml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lilou: error:") and "--format" in err and err.count("\n") == 1


def test_a_family_name_shows_its_board_and_says_so(capsys):
    """`lilou gpus a100` showed one of four A100 boards with no word, where infer says which one the name took."""
    assert main(["gpus", "a100", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert [g["name"] for g in json.loads(captured.out)] == ["a100-sxm4-40gb"]
    assert captured.err == ("lilou: warning: GPU name 'a100' is ambiguous; using a100-sxm4-40gb (other matches: "
                            "a100-pcie-40gb, a100-pcie-80gb, a100-sxm4-80gb); pass the full name to choose\n")
    assert main(["gpus", "a10g", "--format", "json"]) == 0 and capsys.readouterr().err == ""


def test_a_mig_slice_shows_the_resources_the_model_sees(capsys):
    """`lilou gpus a100-80gb/3g.40gb` was refused as an unknown GPU; it shows the slice as infer prices it."""
    from lilou.hardware import resolve_device

    assert main(["gpus", "a100-sxm4-80gb/3g.40gb", "a10g", "--format", "json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert entries[0] == resolve_device("a100-sxm4-80gb", "3g.40gb").to_dict()
    assert (entries[0]["name"], entries[0]["sms"], entries[0]["memory_gb"]) == ("a100-sxm4-80gb/3g.40gb", 42, 40)
    assert entries[1]["name"] == "a10g" and "mig_profiles" in entries[1]
    assert main(["gpus", "h100-sxm/1g.10gb"]) == 0
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
            for line in capsys.readouterr().out.splitlines() if line.startswith("│")}
    #       SMs, memory GB, GiB seen, GB/s (1/8 of 3350), L2 MB (1/8 of 50), FP32, FP16 TC, BF16 TC, FP8 TC, SM share
    assert rows == {"h100-sxm/1g.10gb": ["16", "10", "9.75", "418.8", "6.25", "8.1", "119.9", "119.9", "239.9", "12%"]}


def test_a_slice_the_gpu_lacks_exits_2(capsys):
    assert main(["gpus", "t4/1g.5gb"]) == 2
    assert capsys.readouterr().err == "lilou: error: GPU 't4' has no MIG support, so it has no profile '1g.5gb'\n"
    assert main(["gpus", "a100-sxm4-80gb/9g.99gb"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lilou: error:") and "3g.40gb" in err and err.count("\n") == 1
