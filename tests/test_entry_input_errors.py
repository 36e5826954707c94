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
    ({"val_fraction": 1.5}, r"data.val_fraction=1.5: give a fraction of the training rows in \[0, 1\)")])
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


@pytest.mark.parametrize("override, message", [
    ("trainer.max_epochs=0", "trainer.max_epochs=0: that trains nothing"),
    ("seed=abc", "seed=abc: give an integer")])
def test_fit_refuses_settings_that_train_nothing_or_cannot_seed(override, message):
    from lilou.latency.kernel_model.training import fit
    from lilou.research.ablation import compose

    with pytest.raises(LilouInputError, match=f"^{message}"):
        fit(compose(["experiment=kernel_latency", override]))
