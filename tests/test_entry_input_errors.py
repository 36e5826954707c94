"""Bad input to the Hydra entry points and the ablation scripts: one line on stderr and exit status 2, as the CLI
does, not Hydra's 25-line traceback with exit status 1."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lilou.errors import LilouInputError
from lilou.latency.kernel_model.datamodule import KernelDataModule
from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[1]


def _error_lines(stderr: str) -> list[str]:
    """stderr without Lightning's log lines ("INFO: Seed set to 0")."""
    return [line for line in stderr.strip().splitlines() if not line.startswith("INFO:")]


def _run(module: str, *overrides: str, tmp_path: Path, datasets_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "LILOU_DATA_DIR": str(datasets_dir), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", module, *overrides, f"hydra.run.dir={tmp_path}"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def test_train_with_an_unknown_op_is_one_line_and_exit_2(tmp_path, datasets_dir):
    result = _run("lilou.train", "data.ops=[bogus]", "output_checkpoint=null", tmp_path=tmp_path,
                  datasets_dir=datasets_dir)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = _error_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("lilou.train: error: unknown NeuSight op(s) bogus; known: ")
    assert "Traceback" not in result.stderr


def test_train_with_max_rows_0_names_the_setting(tmp_path, datasets_dir):
    result = _run("lilou.train", "data.max_rows=0", "output_checkpoint=null", tmp_path=tmp_path,
                  datasets_dir=datasets_dir)
    assert result.returncode == 2
    assert _error_lines(result.stderr) == [("lilou.train: error: data.max_rows=0: give a positive number of training rows, "
                                      "or null for all")]


def test_eval_with_a_missing_checkpoint_is_one_line_and_exit_2(tmp_path, datasets_dir):
    result = _run("lilou.eval", "experiment=kernel_latency", f"checkpoint={tmp_path / 'nothing'}",
                  "data.held_out_gpus=[t4]", tmp_path=tmp_path, datasets_dir=datasets_dir)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = _error_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("lilou.eval: error: ") and "nothing" in lines[0]


@pytest.mark.parametrize("kwargs, message", [
    ({"max_rows": 0}, "data.max_rows=0: give a positive number of training rows, or null for all"),
    ({"val_fraction": 1.5}, r"data.val_fraction=1.5: give a fraction of the training rows in \[0, 1\)"),
    # a string (data.val_fraction=abc) was a TypeError from the comparison, wrapped by Hydra, exit status 1
    ({"val_fraction": "abc"}, r"data.val_fraction=abc: give a fraction of the training rows in \[0, 1\)"),
    ({"batch_size": 0}, "data.batch_size=0: give a positive number of rows per batch")])
def test_the_data_module_refuses_settings_that_leave_a_split_empty(kwargs, message):
    with pytest.raises(LilouInputError, match=f"^{message}$"):
        KernelDataModule(**kwargs)


def test_ablate_kernels_refuses_an_unknown_fold_in_one_line(capsys):
    module = load_script("ablate_kernels")
    with pytest.raises(SystemExit) as exited:
        module.main(["--folds", "t4x"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == ("ablate_kernels.py: error: --folds t4x: unknown fold(s) t4x; "
                                       "known: a100, p100, p4, t4, v100\n")


@pytest.mark.parametrize("groups, message", [
    (["family", "waves", "bogus"], "data.feature_groups: unknown feature group(s) bogus; known: family, shape, "),
    ([], "data.feature_groups: unknown feature group(s) (none given); known: family, ")])
def test_unknown_or_no_feature_groups_are_refused(groups, message):
    with pytest.raises(LilouInputError) as error:
        KernelDataModule(feature_groups=groups)
    assert str(error.value).startswith(message)


def test_an_unknown_loss_is_refused():
    from lilou.latency.kernel_model.lit_module import KernelLatencyModule

    with pytest.raises(LilouInputError, match=r"^model.loss=bogus: unknown loss; known: mape, log_l1$"):
        KernelLatencyModule(num_features=4, num_type_features=4, loss="bogus")
    assert KernelLatencyModule(num_features=4, num_type_features=4, loss="log_l1").hparams.loss == "log_l1"


@pytest.mark.parametrize("kwargs, message", [
    # a TypeError from torch (empty(): argument 'size') or Adam ('<=' not supported), exit status 1
    ({"hidden": "abc"}, r"model.hidden=abc: give a list of positive layer widths, e.g. \[256,256,128\]$"),
    ({"hidden": 64}, r"model.hidden=64: give a list of positive layer widths"),
    ({"hidden": [64, 0]}, r"model.hidden=\[64, 0\]: give a list of positive layer widths"),
    ({"lr": "abc"}, r"model.lr=abc: give a positive learning rate$"),
    ({"dropout": 1}, r"model.dropout=1: give a probability in \[0, 1\)$"),
    ({"weight_decay": -1}, r"model.weight_decay=-1: give a number >= 0$")])
def test_the_kernel_module_refuses_settings_the_net_cannot_take(kwargs, message):
    from lilou.latency.kernel_model.lit_module import KernelLatencyModule

    with pytest.raises(LilouInputError, match=f"^{message}"):
        KernelLatencyModule(num_features=4, num_type_features=4, **kwargs)
    assert KernelLatencyModule(num_features=4, num_type_features=4, hidden=[8, 4], lr=1e-3).net is not None


def test_train_with_a_mistyped_model_setting_is_one_line_and_exit_2(tmp_path, datasets_dir):
    result = _run("lilou.train", "model.lr=abc", "trainer.max_epochs=1", "data.max_rows=2000", tmp_path=tmp_path,
                  datasets_dir=datasets_dir)
    assert result.returncode == 2
    assert _error_lines(result.stderr)[-1:] == ["lilou.train: error: model.lr=abc: give a positive learning rate"]


@pytest.mark.parametrize("override, message", [
    ("trainer.max_epochs=0", "trainer.max_epochs=0: that trains nothing"),
    # compared with 0 and -1: a TypeError traceback, exit status 1
    ("trainer.max_epochs=abc", r"trainer.max_epochs=abc: give an integer number of epochs \(-1: no limit\)$"),
    ("+trainer.max_steps=1.5", r"trainer.max_steps=1.5: give an integer number of steps \(-1: no limit\)$"),
    ("seed=abc", "seed=abc: give an integer"),
    ("ensemble=0", r"ensemble=0: give a positive integer$"),
    ("torch_threads=abc", r"torch_threads=abc: give a positive integer \(0 or null: torch's default\)$")])
def test_fit_refuses_settings_that_train_nothing_or_cannot_seed(override, message):
    from lilou.latency.kernel_model.training import fit
    from lilou.research.ablation import compose

    with pytest.raises(LilouInputError, match=f"^{message}"):
        fit(compose(["experiment=kernel_latency", override]))


@pytest.mark.parametrize("module, overrides, line", [
    ("lilou.train", ["experiment=kernel_latnecy"],
     "lilou.train: error: In 'train': Could not find 'experiment/kernel_latnecy' Available options in 'experiment': "
     "e2e_calibration fusion_gnn fusion_gnn_eager fusion_gnn_heldout fusion_gnn_tvm kernel_latency "
     "kernel_latency_geometry kernel_latency_tensor kernel_table"),
    ("lilou.train", ["experiment=kernel_latency", "data.held_ot_gpus=[t4]"],
     "lilou.train: error: Could not override 'data.held_ot_gpus'. To append to your config use "
     "+data.held_ot_gpus=[t4] Key 'held_ot_gpus' is not in struct"),
    ("lilou.train", ["experiment=kernel_latency", "data.held_out_gpus=[t4"],
     "lilou.train: error: data.held_out_gpus=[t4: no viable alternative at input '[t4' See "
     "https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details"),
    ("lilou.train", ["-m", "experiment=kernel_latency", "seed=1,2", "data.nope=3"],
     "lilou.train: error: Could not override 'data.nope'. To append to your config use +data.nope=3 "
     "Key 'nope' is not in struct"),
    ("lilou.research.e2e_task", ["experiment=e2e_calibration", "e2e.model_dir=x"],
     "lilou.research.e2e_task: error: Could not override 'e2e.model_dir'. To append to your config use "
     "+e2e.model_dir=x Key 'model_dir' is not in struct"),
    ("lilou.eval", ["experiment=kernel_latency", "checkpoint.x=1"],
     "lilou.eval: error: Could not override 'checkpoint.x'. To append to your config use +checkpoint.x=1 "
     "Key 'x' is not in struct")])
def test_a_command_line_hydra_cannot_compose_is_one_line_and_exit_2(module, overrides, line, tmp_path, datasets_dir):
    # Hydra printed 4-20 lines (its search path, "Set the environment variable HYDRA_FULL_ERROR=1") and exit status 1
    result = _run(module, *overrides, f"hydra.sweep.dir={tmp_path}", tmp_path=tmp_path, datasets_dir=datasets_dir)
    assert (result.returncode, result.stderr) == (2, line + "\n")


def test_an_error_inside_a_run_is_still_a_traceback_with_exit_1(tmp_path, datasets_dir):
    # HYDRA_FULL_ERROR (set so that Hydra hands its composition errors on) leaves a bug a bug
    result = _run("lilou.train", "experiment=kernel_latency", "task=kernel_latency", "data._target_=builtins.int",
                  tmp_path=tmp_path, datasets_dir=datasets_dir)
    assert result.returncode == 1 and "Traceback (most recent call last)" in result.stderr


@pytest.mark.parametrize("script, argv, line", [
    ("bench_kernel_table", ["--per-group", "0"],
     "bench_kernel_table.py: error: --per-group=0: give a positive whole number of rows per source, GPU, dtype and "
     "family"),
    ("bench_kernels", ["--per-group", "-3"],  # was found only after the five folds had trained
     "bench_kernels.py: error: --per-group=-3: give a positive whole number of rows per source, GPU, dtype and family"),
    ("bench_conv_geometry", ["--experiment", "nosuch"],
     "bench_conv_geometry.py: error: In 'train': Could not find 'experiment/nosuch' Available options in "
     "'experiment': e2e_calibration fusion_gnn fusion_gnn_eager fusion_gnn_heldout fusion_gnn_tvm kernel_latency "
     "kernel_latency_geometry kernel_latency_tensor kernel_table")])
def test_bench_scripts_refuse_bad_arguments_in_one_line(script, argv, line, capsys, monkeypatch):
    module = load_script(script)
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *argv])
    with pytest.raises(SystemExit) as exited:
        module.main()
    assert (exited.value.code, capsys.readouterr().err) == (2, line + "\n")


def test_bench_intervals_names_a_missing_e2e_json_before_any_fold(tmp_path, capsys):
    module = load_script("bench_intervals")
    with pytest.raises(SystemExit) as exited:
        module.main(["--e2e-json", str(tmp_path / "e2e.json"), "--out", str(tmp_path)])
    assert (exited.value.code, capsys.readouterr().err) == (
        2, f"bench_intervals.py: error: --e2e-json {tmp_path / 'e2e.json'}: no such file (`make bench-e2e` writes "
           "outputs/bench/e2e.json)\n")


def test_the_table_data_module_takes_one_source_as_a_string_and_refuses_an_empty_sample():
    from lilou.latency.kernel_model.table_datamodule import KernelTableDataModule

    # data.sources=vidur (not [vidur]) became five one-letter sources
    assert KernelTableDataModule(sources="vidur").sources == ("vidur",)
    assert KernelDataModule(ops="linear").ops == ("linear",)  # was ('l', 'i', 'n', 'e', 'a', 'r')
    with pytest.raises(LilouInputError, match=r"^data.per_group=0: give a positive whole number of rows per "):
        KernelTableDataModule(per_group=0)


@pytest.mark.parametrize("script, argv, line", [
    ("bench_graph", ["--models", "nosuch", "--repeats", "1"],  # a KeyError traceback
     "bench_graph.py: error: --models: unknown model(s) nosuch; known: resnet50, bert-base, gpt3_27"),
    ("bench_graph", ["--repeats", "0"], "bench_graph.py: error: --repeats 0: give at least 1"),
    ("bench_speed", ["--repeats", "0"],  # an UnboundLocalError after warming every case
     "bench_speed.py: error: --repeats 0: give at least 1")])
def test_speed_benchmarks_refuse_bad_arguments_before_running_anything(script, argv, line):
    result = subprocess.run([sys.executable, str(REPO / "scripts" / f"{script}.py"), *argv], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == line


def test_bench_intervals_says_when_it_does_not_read_the_e2e_json_it_was_given(tmp_path, capsys, monkeypatch):
    # with make calibrate's residuals on disk, --e2e-json and --per-group were ignored without a word
    module = load_script("bench_intervals")
    saved, e2e = tmp_path / "residuals.npz", tmp_path / "e2e.json"
    saved.write_bytes(b"")
    e2e.write_text("{}")
    monkeypatch.setattr(module, "RESIDUALS_FILE", saved)
    monkeypatch.setattr(module, "REPO", tmp_path)  # its --help names the file relative to the repository

    class Loaded(Exception):
        pass

    def load_residuals(path):
        assert path == saved
        raise Loaded

    monkeypatch.setattr(module, "load_residuals", load_residuals)
    with pytest.raises(Loaded):
        module.main(["--e2e-json", str(e2e), "--per-group", "100", "--no-speed", "--out", str(tmp_path)])
    assert capsys.readouterr().err == (f"bench_intervals.py: note: --e2e-json {e2e} and --per-group 100 not used: the "
                                       f"residuals are {saved} (make calibrate); --recompute rebuilds them with it\n")
    with pytest.raises(Loaded):  # the defaults say nothing
        module.main(["--no-speed", "--out", str(tmp_path)])
    assert capsys.readouterr().err == ""


def test_bench_data_children_report_a_missing_source_in_one_line(tmp_path, capsys):
    # was "bench_data: child failed:" and the child's 15-line traceback, exit status 1
    module = load_script("bench_data")
    assert module.run_child("import json, sys\nprint(json.dumps({'argv': sys.argv[1:]}))", "/x", str(tmp_path)) == \
        {"argv": ["/x"]}
    with pytest.raises(SystemExit) as exited:
        module.run_child(module._BUILD, str(tmp_path / "none"), str(tmp_path))
    assert (exited.value.code, capsys.readouterr().err) == (
        2, f"bench_data.py: error: dataset 'neusight' not found in {tmp_path / 'none'}: run `lilou data fetch neusight` "
           "or set LILOU_DATA_DIR (or --data-dir) to a mirror such as ../shared/datasets\n")


@pytest.mark.parametrize("script, argv, source", [("bench_e2e", [], "neusight"),
                                                  ("bench_llm", ["--quick"], "aiconfigurator")])
def test_benchmarks_without_their_data_say_what_to_fetch_in_one_line(script, argv, source, tmp_path, capsys,
                                                                     monkeypatch):
    module = load_script(script, register=True)  # bench_llm's dataclasses look their module up
    monkeypatch.setenv("LILOU_DATA_DIR", str(tmp_path / "none"))
    try:
        with pytest.raises(SystemExit) as exited:
            module.main([*argv, "--out", str(tmp_path / "out")])
    finally:
        sys.modules.pop(module.__name__, None)
    assert (exited.value.code, capsys.readouterr().err.splitlines()[-1]) == (
        2, f"{script}.py: error: dataset '{source}' not found in {tmp_path / 'none'}: run `lilou data fetch {source}` "
           "or set LILOU_DATA_DIR (or --data-dir) to a mirror such as ../shared/datasets")


@pytest.mark.parametrize("script, argv, line", [
    # ran the whole ablation on every GPU (107 s), as if --gpus were not given
    ("ablate_e2e", ["--gpus", ""], "ablate_e2e.py: error: --gpus '': empty list; name at least one, comma-separated"),
    ("ablate_e2e", ["--models", " , "],
     "ablate_e2e.py: error: --models ' , ': empty list; name at least one, comma-separated"),
    # a MissingDataError traceback, exit status 1
    ("bench_fusion", ["--data", "{tmp}/none"],
     "bench_fusion.py: error: no fusion graphs under {tmp}/none; build them with `make fusion-data`"),
    # --requests 0 served 2,000 memory requests and wrote serve.json, exit 0; --concurrency 0 was a TypeError
    ("bench_serve", ["--requests", "0"], "bench_serve.py: error: --requests 0: give at least 1"),
    ("bench_serve", ["--concurrency", "0"], "bench_serve.py: error: --concurrency 0: give at least 1")])
def test_more_scripts_refuse_bad_arguments_in_one_line(script, argv, line, tmp_path, capsys, monkeypatch):
    module = load_script(script)
    monkeypatch.setattr(sys, "argv", [f"{script}.py"])  # argparse's prog
    with pytest.raises(SystemExit) as exited:
        module.main([a.format(tmp=tmp_path) for a in argv] + ["--out", str(tmp_path / "out")])
    assert (exited.value.code, capsys.readouterr().err.splitlines()[-1]) == (2, line.format(tmp=tmp_path))
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_train_help_into_a_closed_pipe_is_quiet():
    # python -m lilou.train --help | head -30 ended in a BrokenPipeError traceback
    process = subprocess.Popen([sys.executable, "-m", "lilou.train", "--help"], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
    process.stdout.close()  # the reader is gone before the help is written
    stderr = process.stderr.read().decode()
    assert (process.wait(timeout=120), stderr) == (0, "")
