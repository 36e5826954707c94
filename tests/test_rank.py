"""`lilou rank`: every device or the listed ones, fastest first; the graph is read and fused once."""
from __future__ import annotations

import json

import pytest

from lilou.cli import main
from lilou.hardware import all_devices
from tests.conftest import REPO

EXAMPLE = str(REPO / "examples" / "resnet18.onnx")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def rank_json(capsys, *argv: str) -> list[dict]:
    code, out, err = run(capsys, "rank", EXAMPLE, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_every_gpu_and_mig_profile_fastest_first(capsys):
    ranking = rank_json(capsys)
    devices = all_devices()
    assert len(ranking) == len(devices)
    assert {(r["gpu"], r["mig"]) for r in ranking} == {(d.gpu, d.mig) for d in devices}
    assert all(set(r) == {"gpu", "mig", "latency_ms", "interval_ms", "extrapolated_share", "fits", "precision",
                          "precision_path", "precision_note", "precision_warnings", "tf32", "gpu_work_ms", "memory_gb",
                          "backend"}
               for r in ranking)
    assert {r["precision_path"] for r in ranking} == {"native"}  # FP32 runs natively everywhere
    assert all(r["interval_ms"][0] <= r["latency_ms"] * 1.5 and r["interval_ms"][1] >= r["interval_ms"][0] > 0
               for r in ranking)
    latencies = [r["latency_ms"] for r in ranking]
    assert latencies == sorted(latencies) and latencies[0] > 0
    assert all(0 < r["gpu_work_ms"] <= r["latency_ms"] for r in ranking)


def test_listed_gpus_and_slices(capsys):
    ranking = rank_json(capsys, "--gpus", "t4,a10g,a100-80gb/1g.10gb,NVIDIA A10G")
    # "NVIDIA A10G" is the a10g again: listed once. ResNet-18 at batch 1 waits on the host on all three, so
    # the T4 and the 1g.10gb slice come within 1 % of each other; only the order by latency is asserted.
    assert len(ranking) == 3 and ranking[0]["gpu"] == "a10g"
    assert {(r["gpu"], r["mig"]) for r in ranking} == {("a10g", None), ("t4", None), ("a100-sxm4-80gb", "1g.10gb")}
    assert [r["latency_ms"] for r in ranking] == sorted(r["latency_ms"] for r in ranking)


def test_a_slash_without_a_profile_is_refused(capsys):
    code, out, err = run(capsys, "rank", EXAMPLE, "--gpus", "t4,a100-80gb/")
    assert code == 2 and out == "" and err == ("lilou: error: 'a100-80gb/': no MIG profile after the '/'; name the "
                                               "whole GPU as 'a100-80gb' or one slice as GPU/PROFILE, e.g. "
                                               "a100-80gb/1g.10gb (see `lilou gpus`)\n")


def test_rank_agrees_with_infer(capsys):
    ranking = {(r["gpu"], r["mig"]): r["latency_ms"] for r in rank_json(capsys, "--gpus", "a10g,h100-sxm/3g.40gb")}
    for gpu, mig in ranking:
        argv = ["infer", EXAMPLE, "--gpu", gpu, "--format", "json"] + (["--mig", mig] if mig else [])
        assert main(argv) == 0
        assert json.loads(capsys.readouterr().out)["latency_ms"] == pytest.approx(ranking[(gpu, mig)], abs=1e-3)


def test_graph_is_read_and_fused_once(capsys, graph_work):
    calls = graph_work
    assert len(rank_json(capsys)) == len(all_devices())
    assert calls == {"load": 1, "fuse": 1}


def test_table(capsys):
    code, out, _ = run(capsys, "rank", EXAMPLE, "--gpus", "a10g,t4")
    assert code == 0
    words = " ".join(out.split())  # the title wraps where the checkout's path is long
    assert "2 devices, fastest first" in words and "a10g" in out and "1.00x" in out


def test_python_api(capsys):
    from lilou import Predictor

    ranking = Predictor().rank(EXAMPLE, gpus=["a10g", "t4"])
    assert ranking.to_json() == rank_json(capsys, "--gpus", "a10g,t4")
    assert [entry.device for entry in ranking] == ["a10g", "t4"]
    assert any("fallback" in w for w in ranking.warnings)


@pytest.mark.parametrize(("argv", "message"), [
    (["--gpus", "a10g,nosuchgpu"], "unknown GPU 'nosuchgpu'"),
    (["--gpus", "a10g/1g.10gb"], "has no MIG support"),
    (["--gpus", "a100-80gb/9g.9gb"], "has no MIG profile '9g.9gb'"),
    (["--gpus", ","], "no GPU named"),
    (["--batch", "0"], "--batch must be a positive integer"),
    (["--shape", "x=2xy"], "cannot parse --shape"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    code, out, err = run(capsys, "rank", EXAMPLE, *argv)
    assert code == 2 and out == ""
    assert err.startswith("lilou: error:") and err.count("\n") == 1 and "Traceback" not in err
    assert message in err


CONSUMER = "gtx-1080-ti,titan-x-pascal,titan-xp,rtx-2080-ti,titan-rtx"


def test_launch_bound_devices_tie_and_are_ordered_by_gpu_work(capsys, tmp_path):
    """A NAS-Bench-201 cell at batch 32 launches 279 kernels of a few microseconds: on these five boards the host's
    launches set the latency, so they tie; the GPU work orders them (alphabetical before), and a warning says so."""
    from lilou.zoo import export_onnx

    model = tmp_path / "nas201.onnx"
    export_onnx("nas201-0", model, batch=32, strip_weights=True)
    code, out, err = run(capsys, "rank", str(model), "--gpus", CONSUMER, "--format", "json")
    assert code == 0, err
    ranking = json.loads(out)
    assert len({r["latency_ms"] for r in ranking}) == 1
    work = [r["gpu_work_ms"] for r in ranking]
    assert work == sorted(work) and work[0] < work[-1] <= 0.5 * ranking[0]["latency_ms"]
    assert "5 devices are launch-bound" in err and "30 us each" in err


def test_launch_bound_note_needs_two_tied_devices():
    from lilou.caveats import launch_bound_note
    from lilou.results import RankEntry

    def entry(gpu: str, latency: float, work: float) -> RankEntry:
        return RankEntry(gpu, None, latency, gpu_work_ms=work)

    tied = [entry("a", 2.00, 0.3), entry("b", 2.01, 0.9), entry("c", 2.40, 1.9)]
    (note,) = launch_bound_note(tied, 0.03)
    assert note.startswith("2 devices are launch-bound (a, b): the host's kernel launches (30 us each")
    assert "0.300-0.900 ms" in note
    assert launch_bound_note(tied[:1] + tied[2:], 0.03) == []           # one launch-bound device
    (apart,) = launch_bound_note([entry("a", 2.0, 0.3), entry("b", 2.1, 0.4)], 0.03)   # 5 % apart: no tie, a spread
    assert apart == ("2 devices are launch-bound (a, b): the host's kernel launches (30 us each, measured on "
                     "NeuSight's 2023 hosts) set most of their predicted latency, not the GPU: they are within 5.0 % of "
                     "each other (2.000-2.100 ms); their GPU work alone (0.300-0.400 ms) is what a faster host would "
                     "see")
    assert launch_bound_note([entry("a", 2.0, 1.2), entry("b", 2.0, 1.3)], 0.03) == []   # GPU-bound
    assert "NeuSight's 2023 hosts" in note
    (given,) = launch_bound_note(tied, 0.012, given=True)  # --launch-gap-us 12: the user's host, said as such
    assert "(12 us each, as given)" in given and "NeuSight" not in given


def test_the_names_cuda_and_node_labels_give_a_slice_work_in_every_command(capsys):
    """`NVIDIA A100-SXM4-80GB MIG 1g.10gb` (torch.cuda.get_device_name() inside a slice) and GPU feature
    discovery's `NVIDIA-H100-80GB-HBM3-MIG-1g.10gb` resolved, but the note on ambiguous names looked the whole
    string up as a GPU and every command refused it as an unknown GPU."""
    cuda, label = "NVIDIA A100-SXM4-80GB MIG 1g.10gb", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    ranking = rank_json(capsys, "--gpus", f"{cuda},{label}")
    assert {(r["gpu"], r["mig"]) for r in ranking} == {("a100-sxm4-80gb", "1g.10gb"), ("h100-sxm", "1g.10gb")}
    code, out, err = run(capsys, "infer", EXAMPLE, "--gpu", cuda, "--format", "json")
    assert code == 0, err
    assert (json.loads(out)["gpu"], json.loads(out)["mig"]) == ("a100-sxm4-80gb", "1g.10gb")
    code, out, err = run(capsys, "llm", "llama-3.1-8b", "--gpu", label, "--input-len", "128", "--output-len", "16",
                         "--format", "json")
    assert code == 0, err
    assert (json.loads(out)["gpu"], json.loads(out)["mig"]) == ("h100-sxm", "1g.10gb")
    code, out, err = run(capsys, "plan", EXAMPLE, "--slo-ms", "50", "--gpus", cuda, "--format", "json")
    assert code == 0, err
    assert [e["device"] for e in json.loads(out)["plan"]] == ["a100-sxm4-80gb/1g.10gb"]


def test_devices_priced_in_two_storage_groups_get_one_warning_per_fact(zoo_onnx):
    """``--precision fp8`` prices GPUs with FP8 tensor cores natively and the others as weight-only kernels (FP16
    activations): two storage groups. Each group said its own fallback line (the same 70 kernels, two ranges) and
    counted devices out of its own size ("29 of 62 devices" in a ranking of 115)."""
    from lilou.api import Predictor

    path = zoo_onnx("mobilenetv2", dynamic_batch=True)
    ranking = Predictor().rank(path, precision="fp8", batch=4096)
    total = len(all_devices())
    assert len(ranking.entries) == total
    fallback = [w for w in ranking.warnings if "use the memory-bound fallback" in w]
    # (99 kernels: FP8 runtimes fold the 52 batch norms into the convolutions before them)
    assert len(fallback) == 1 and fallback[0].startswith("18 of 99 kernels")
    short = [e.device for e in ranking.entries if not e.fits]
    (memory,) = [w for w in ranking.warnings if "does not fit in memory" in w]
    assert f"on {len(short)} of {total} devices (" in memory
    # one line where the interval was widened for it and one where it was not (session 41), each counted of all
    extrapolated = [w for w in ranking.warnings if "every kernel of this model is extrapolated" in w]
    assert 1 <= len(extrapolated) <= 2 and all(f" of {total} devices (" in w for w in extrapolated)
    assert len([w for w in ranking.warnings if "prices the launch gap from" in w]) <= 1


def test_a_device_list_ends_in_dots_only_when_names_are_left_out():
    from lilou.caveats import devices_text

    assert devices_text(["h200/1g.18gb", "h200"], 2) == "2 of 2 devices (h200/1g.18gb, h200)"
    assert devices_text(["a", "b", "c", "d"], 9) == "4 of 9 devices (a, b, c, ...)"
    assert devices_text(["t4"], 3) == "t4"


def test_a_piped_ranking_never_cuts_a_gpu_name(capsys, monkeypatch):
    """Rich shrank every column of a table too wide for 160 columns, the GPU's name included."""
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = run(capsys, "rank", EXAMPLE, "--gpus", "rtx-pro-6000-blackwell-server,a100-sxm4-80gb/3g.40gb")
    assert code == 0 and "…" not in out
    lines = [line for line in out.splitlines() if line.startswith("│")]
    assert any("│ rtx-pro-6000-blackwell-server │" in line for line in lines)
    assert max(len(line) for line in lines) <= 100
