"""A corrupt checkpoint file (a truncated copy, a half-written volume) is one line naming the file and
LILOU_CHECKPOINTS, exit status 2, as a missing checkpoint is; it was an internal error naming no file."""
from __future__ import annotations

import shutil

import pytest

from lilou.cli import main
from tests.conftest import REPO

EXAMPLE = str(REPO / "examples" / "resnet18.onnx")
BAD_HEADER = "SafetensorError: Error while deserializing header: invalid header length"
REMEDY = "restore it from the repository's checkpoints/ or set LILOU_CHECKPOINTS to a folder with intact checkpoints"


def _truncate(path, size=1000):
    with open(path, "r+b") as handle:
        handle.truncate(size)


@pytest.mark.parametrize(("name", "spoil", "why"), [
    ("kernel_latency/model.safetensors", _truncate, BAD_HEADER),
    ("kernel_latency/config.json", lambda path: path.write_text("{"),
     "JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ("kernel_latency_tensor/model.safetensors", _truncate, BAD_HEADER),
    ("e2e_overhead/model.json", lambda path: path.write_text(""), "JSONDecodeError: Expecting value: line 1 column 1 (char 0)"),
])
def test_a_corrupt_checkpoint_file_is_named(name, spoil, why, tmp_path, monkeypatch, capsys):
    shutil.copytree(REPO / "checkpoints", tmp_path / "checkpoints")
    spoil(tmp_path / "checkpoints" / name)
    monkeypatch.setenv("LILOU_CHECKPOINTS", str(tmp_path / "checkpoints"))
    assert main(["infer", EXAMPLE, "--gpu", "a10g", "--format", "json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"lilou: error: checkpoint file {tmp_path}/checkpoints/{name} cannot be read ({why}): {REMEDY}\n"


def test_other_errors_while_loading_are_left_alone(tmp_path):
    from lilou.checkpoints import reading_checkpoints

    shutil.copytree(REPO / "checkpoints" / "kernel_latency", tmp_path / "kernel_latency")
    with pytest.raises(KeyError, match="weights"), reading_checkpoints(tmp_path / "kernel_latency", tmp_path / "gone"):
        raise KeyError("weights")  # a bug, not a file's fault: its own traceback
