"""What a training run records (command, commit, data folder, date, the kernel model the end-to-end fit used), and
where it may write (checked before training)."""
from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from tests.conftest import load_script

from lilou.errors import LilouInputError

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"


@contextlib.contextmanager
def hydra_job(overrides: list[str], output_dir: Path, config_name: str = "train"):
    """``overrides`` composed as a Hydra job would be (HydraConfig set: its task overrides and output folder)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name, overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    HydraConfig.instance().set_config(cfg)
    try:
        yield cfg
    finally:
        HydraConfig.instance().cfg = None


def head() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "afile"
    path.write_text("a regular file, not a folder\n")
    return path


# ----------------------------------------------------------------- provenance (one helper, every task)

def test_train_command_is_the_jobs_own_overrides_not_the_sweep_line(tmp_path, monkeypatch):
    """A sweep job (``-m seed=0,1``) recorded the whole sweep line, sys.argv, as its command."""
    from lilou.runs import run_provenance

    monkeypatch.setattr(sys, "argv", ["lilou/train.py", "-m", "experiment=kernel_latency", "seed=0,1",
                                      "hydra.sweep.dir=/somewhere"])
    with hydra_job(["experiment=kernel_latency", "seed=1"], tmp_path):
        run = run_provenance(tmp_path / "data")
    assert run["command"] == "python -m lilou.train experiment=kernel_latency seed=1"
    assert run["git_commit"].removesuffix("-dirty") == head()
    assert run["data_dir"] == str(tmp_path / "data")
    assert time.strptime(run["date"], "%Y-%m-%dT%H:%M:%SZ")


def test_the_command_names_the_module_that_ran_it(monkeypatch):
    """``python -m lilou.research.e2e_task`` recorded itself as ``python -m lilou.train``."""
    from lilou.runs import entry_point

    monkeypatch.setattr(sys, "argv", [str(REPO / "lilou" / "research" / "e2e_task.py"), "experiment=e2e_calibration"])
    assert entry_point() == "python -m lilou.research.e2e_task"
    monkeypatch.setattr(sys, "argv", [str(REPO / "lilou" / "train.py")])
    assert entry_point() == "python -m lilou.train"
    monkeypatch.setattr(sys, "argv", ["/usr/bin/pytest"])
    assert entry_point() == "python -m lilou.train"


def test_kernel_checkpoint_records_its_jobs_command_commit_data_dir_and_date(tmp_path, monkeypatch, datasets_dir):
    """The kernel task wrote the sweep line as its command and no commit; config.json recorded neither."""
    from lilou.latency.kernel_model.training import train_kernel_model

    monkeypatch.setattr(sys, "argv", ["lilou/train.py", "-m", "seed=0,1", "data.max_rows=400"])
    overrides = ["experiment=kernel_latency", "output_checkpoint=null", "seed=1", "data.max_rows=400",
                 "trainer.max_epochs=1", "trainer.enable_progress_bar=false", "~logger", f"data.data_dir={datasets_dir}"]
    with hydra_job(overrides, tmp_path / "run") as cfg:
        train_kernel_model(cfg)
    checkpoint = tmp_path / "run" / "checkpoint"
    metrics = json.loads((checkpoint / "metrics.json").read_text())
    config = json.loads((checkpoint / "config.json").read_text())
    command = "python -m lilou.train " + " ".join(overrides)
    for written in (metrics, config):
        assert written["command"] == command
        assert written["git_commit"].removesuffix("-dirty") == head()
        assert written["data_dir"] == str(Path(datasets_dir).resolve())  # CI: ../shared is a symlink
    assert time.strptime(metrics["date"], "%Y-%m-%dT%H:%M:%SZ")
    assert "date" not in config  # two runs of one seed write the same config.json


def test_e2e_task_records_its_command_and_copies_after_checking_the_output(tmp_path, monkeypatch):
    """The e2e task recorded `python -m lilou.latency.composition.calibrate` in config.json and the sweep line (as
    ``hydra_command``) in metrics.json; an unwritable output_checkpoint failed only after the fit."""
    import lilou.latency.composition.calibrate as calibrate
    from lilou.research.e2e_task import train_e2e_calibration

    calls = []

    def fake_fit(argv):
        calls.append(argv)
        output = Path(argv[argv.index("--output") + 1])
        output.mkdir(parents=True, exist_ok=True)
        (output / "model.json").write_text("{}\n")
        (output / "config.json").write_text(json.dumps({"command": calibrate.COMMAND, "kernel_fingerprint": "x"}))
        (output / "metrics.json").write_text(json.dumps({"leave_one_gpu_out": {"mape": 7.5}}))
        return 0

    monkeypatch.setattr(calibrate, "main", fake_fit)
    monkeypatch.setattr(sys, "argv", ["lilou/train.py", "-m", "experiment=e2e_calibration", "seed=0,1"])
    bad = a_file(tmp_path) / "e2e"
    with (hydra_job(["experiment=e2e_calibration", f"output_checkpoint={bad}"], tmp_path / "bad") as cfg,
          pytest.raises(LilouInputError, match=f"^output_checkpoint={bad}: cannot write there")):
        train_e2e_calibration(cfg)
    assert calls == []  # refused before the fit

    target = tmp_path / "out" / "e2e"
    overrides = ["experiment=e2e_calibration", "seed=1", f"output_checkpoint={target}"]
    with hydra_job(overrides, tmp_path / "run") as cfg:
        assert train_e2e_calibration(cfg) == 7.5
    for folder in (tmp_path / "run" / "checkpoint", target):
        config = json.loads((folder / "config.json").read_text())
        metrics = json.loads((folder / "metrics.json").read_text())
        assert config["command"] == metrics["command"] == "python -m lilou.train " + " ".join(overrides)
        assert config["kernel_fingerprint"] == "x"
        assert "hydra_command" not in metrics
        assert metrics["git_commit"].removesuffix("-dirty") == head() and metrics["seed"] == 1


def test_e2e_task_module_entry_reports_bad_input_in_one_line(tmp_path):
    """`python -m lilou.research.e2e_task` bypassed exit_on_input_error: a traceback, after the fit."""
    bad = a_file(tmp_path) / "e2e"
    result = subprocess.run([sys.executable, "-m", "lilou.research.e2e_task", "experiment=e2e_calibration",
                             f"output_checkpoint={bad}", f"hydra.run.dir={tmp_path / 'run'}"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"lilou.research.e2e_task: error: output_checkpoint={bad}: cannot write there")
    assert "Traceback" not in result.stderr


# ----------------------------------------------------------------- the e2e constants know their kernel model

def test_shipped_e2e_constants_record_the_shipped_kernel_models_fingerprint():
    from lilou.runs import weights_fingerprint

    config = json.loads((REPO / "checkpoints" / "e2e_overhead" / "config.json").read_text())
    assert config["kernel_fingerprint"] == weights_fingerprint(REPO / "checkpoints" / "kernel_latency")


def test_e2e_constants_fitted_on_other_kernel_weights_warn_when_loaded(tmp_path):
    """After retraining the kernel model, the overhead constants fitted on the old one were used silently."""
    from lilou.latency.composition.overhead import StaleOverheadWarning, load_overhead

    shipped = REPO / "checkpoints" / "e2e_overhead"
    kernel = REPO / "checkpoints" / "kernel_latency"
    with warnings.catch_warnings():
        warnings.simplefilter("error", StaleOverheadWarning)
        load_overhead(shipped, kernel)  # fitted on these weights: silent
    stale = tmp_path / "e2e"
    shutil.copytree(shipped, stale)
    config = json.loads((stale / "config.json").read_text())
    (stale / "config.json").write_text(json.dumps({**config, "kernel_fingerprint": "0123456789abcdef"}))
    with pytest.warns(StaleOverheadWarning, match="fitted on a kernel model of fingerprint 0123456789abcdef, not on"):
        params = load_overhead(stale, kernel)
    assert params == load_overhead(shipped)
    del config["kernel_fingerprint"]  # a fit from before the fingerprint: nothing to compare, no warning
    (stale / "config.json").write_text(json.dumps(config))
    with warnings.catch_warnings():
        warnings.simplefilter("error", StaleOverheadWarning)
        load_overhead(stale, kernel)


def test_predictor_warns_for_e2e_constants_of_another_kernel_model(tmp_path):
    from lilou.api import Predictor
    from lilou.latency.composition.overhead import StaleOverheadWarning

    stale = tmp_path / "e2e"
    shutil.copytree(REPO / "checkpoints" / "e2e_overhead", stale)
    config = json.loads((stale / "config.json").read_text())
    (stale / "config.json").write_text(json.dumps({**config, "kernel_fingerprint": "0123456789abcdef"}))
    with pytest.warns(StaleOverheadWarning):
        Predictor(overhead_checkpoint=stale)


def test_every_result_of_e2e_constants_of_another_kernel_model_says_so(tmp_path, monkeypatch, capsys):
    """It was a Python warning at construction only: a service's users, who read the JSON, never saw it (audit ua43c,
    finding 3)."""
    from lilou.api import Predictor
    from lilou.cli import main
    from lilou.latency.composition.overhead import StaleOverheadWarning, stale_kernel_note

    stale = tmp_path / "root" / "e2e_overhead"
    shutil.copytree(REPO / "checkpoints" / "e2e_overhead", stale)
    config = json.loads((stale / "config.json").read_text())
    (stale / "config.json").write_text(json.dumps({**config, "kernel_fingerprint": "0123456789abcdef"}))
    note = stale_kernel_note(stale, REPO / "checkpoints" / "kernel_latency")
    assert note.startswith(f"end-to-end constants {stale} were fitted on a kernel model of fingerprint 0123456789abcdef")
    with pytest.warns(StaleOverheadWarning, match="fingerprint 0123456789abcdef"):
        predictor = Predictor(overhead_checkpoint=stale)
    example = str(REPO / "examples" / "resnet18.onnx")
    assert predictor.predict(example, gpu="a10g").warnings.count(note) == 1
    assert predictor.rank(example, gpus=["a10g", "t4"]).warnings.count(note) == 1
    assert note not in Predictor().predict(example, gpu="a10g").warnings
    monkeypatch.setenv("LILOU_CHECKPOINTS", str(tmp_path / "root"))
    with pytest.warns(StaleOverheadWarning):
        assert main(["infer", example, "--gpu", "t4", "--format", "json"]) == 0
    assert note in json.loads(capsys.readouterr().out)["warnings"]


# ----------------------------------------------------------------- output folders checked before training

@pytest.mark.parametrize("module", ["lilou.latency.kernel_model.training", "lilou.fusion.training"])
def test_an_unwritable_output_checkpoint_is_refused_before_training(tmp_path, monkeypatch, module):
    """A path under a regular file was found after training, as a 38-line traceback."""
    import importlib

    training = importlib.import_module(module)

    def never(*args, **kwargs):
        raise AssertionError("trained before checking output_checkpoint")

    monkeypatch.setattr(training, "fit", never)
    bad = a_file(tmp_path) / "ck"
    experiment = "kernel_latency" if "kernel" in module else "fusion_gnn"
    task = training.train_kernel_model if "kernel" in module else training.train_fusion_model
    with (hydra_job([f"experiment={experiment}", f"output_checkpoint={bad}", "~logger"], tmp_path / "run") as cfg,
          pytest.raises(LilouInputError, match=f"^output_checkpoint={bad}: cannot write there")):
        task(cfg)


@pytest.mark.parametrize("script", ["ablate_kernels", "ablate_fusion", "ablate_e2e"])
def test_ablation_out_is_checked_before_any_variant_runs(tmp_path, monkeypatch, capsys, script):
    """`--out` under a regular file: every variant trained, then a traceback at args.out.mkdir."""
    module = load_script(script)

    def never(*args, **kwargs):
        raise AssertionError("ran before checking --out")

    monkeypatch.setattr(module, "run", never)
    argv = ["--quick", "--out", str(a_file(tmp_path) / "abl")]
    if script == "ablate_fusion":
        data = tmp_path / "fusion" / "mlp"
        data.mkdir(parents=True)
        (data / "mlp-v0-dynamo.onnx").write_bytes(b"")
        argv += ["--data", str(tmp_path / "fusion")]
    with pytest.raises(SystemExit) as exit_:
        module.main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"{script}.py: error: --out={tmp_path / 'afile' / 'abl'}: cannot write there "
        f"(Not a directory: {tmp_path / 'afile' / 'abl'}); give a folder you can create and write")


def test_ablation_json_records_the_data_dir(tmp_path, monkeypatch):
    from lilou.research.ablation import write_result

    monkeypatch.setenv("LILOU_DATA_DIR", str(tmp_path / "mirror"))
    write_result("x", [{"a": 1}], ["a"], title="t", seed=0, quick=True, data="d", started=time.perf_counter(),
                 out_dir=tmp_path)
    assert json.loads((tmp_path / "x.json").read_text())["data_dir"] == str(tmp_path / "mirror")


# ----------------------------------------------------------------- an empty validation set

def test_a_sample_too_small_to_validate_is_refused(datasets_dir):
    """data.max_rows=5 shipped a checkpoint with no val_mape and no word of it."""
    from lilou.latency.kernel_model.training import fit
    from lilou.research.ablation import compose

    cfg = compose(["experiment=kernel_latency", "data.max_rows=5", "output_checkpoint=null", "~logger",
                   f"data.data_dir={datasets_dir}"])
    with pytest.raises(LilouInputError, match=r"^data.val_fraction=0.05 of 5 training rows is no validation row"):
        fit(cfg)
