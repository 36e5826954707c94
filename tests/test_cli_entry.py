"""The `lilou` console script (lilou.cli.entry): the read-and-print commands leave without the interpreter's
teardown; what they print and the exit status are main()'s own."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lilou.cli import main

REPO = Path(__file__).resolve().parents[1]
RESNET18 = REPO / "examples" / "resnet18.onnx"


def _console_script(*argv: str, env: dict[str, str] | None = None, **options) -> subprocess.Popen:
    env = dict(env or {**os.environ, "PYTHONPATH": str(REPO)})
    env.pop("LILOU_DEBUG", None)
    return subprocess.Popen([sys.executable, "-c", "from lilou.cli import entry; entry()", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **options)


def test_quick_exit_prints_what_main_prints(capsys):
    argv = ["infer", str(RESNET18), "--gpu", "a10g", "--format", "json"]
    assert main(argv) == 0
    in_process = json.loads(capsys.readouterr().out)
    child = _console_script(*argv)
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    assert json.loads(out) == in_process  # every byte flushed before the process left
    assert in_process["gpu"] == "a10g" and len(in_process["kernels"]) > 20


def test_quick_exit_keeps_the_input_error_status():
    child = _console_script("rank", str(RESNET18), "--gpus", "no-such-gpu")
    out, err = child.communicate(timeout=300)
    assert child.returncode == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("lilou: error:") and "no-such-gpu" in err


@pytest.mark.parametrize("output", [["--format", "json"], []])
def test_quick_exit_on_a_closed_pipe(output):
    """A reader that stops early (`| head`): exit 0 and nothing on stderr, as main() does; the table too (rich's
    console exited with status 1, an internal error's, and said nothing)."""
    child = _console_script("rank", str(RESNET18), *output)
    child.stdout.close()
    err = child.stderr.read()
    assert child.wait(timeout=300) == 0, err
    assert "Traceback" not in err and "error" not in err


def test_a_command_builds_its_own_parser_alone(capsys):
    """`lilou infer ...` builds the infer parser only; `lilou --help` and an unknown command still see them all."""
    from lilou.cli import build_parser
    from lilou.commands import COMMANDS

    subparsers = next(a for a in build_parser("infer")._actions if a.dest == "command")
    assert list(subparsers.choices) == ["infer"]
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    assert list(subparsers.choices) == list(COMMANDS)
    assert main(["infr", str(RESNET18)]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'infr'" in err and "'infer'" in err and "'profile'" in err
    assert main(["infer", "--gpu"]) == 2
    assert capsys.readouterr().err == "lilou: error: infer: argument --gpu: expected one argument\n"  # one prefix


def test_plot_with_an_unwritable_home_leaves_nothing_behind(tmp_path):
    """With a read-only HOME, matplotlib made /tmp/matplotlib-XXXXXXXX, said so in several lines on stderr, and
    left the folder behind: its atexit hook does not run at a quick exit."""
    home, temporary, plot = tmp_path / "home", tmp_path / "tmp", tmp_path / "kernels.png"
    home.write_text("a file: nothing can be made under it, not even by root")
    temporary.mkdir()
    env = {"HOME": str(home), "TMPDIR": str(temporary), "XDG_CONFIG_HOME": "", "XDG_CACHE_HOME": "", "MPLCONFIGDIR": ""}
    child = _console_script("infer", str(RESNET18), "--gpu", "a10g", "--plot", str(plot), "--format", "json",
                            env={**os.environ, "PYTHONPATH": str(REPO), **env})
    out, err = child.communicate(timeout=300)
    assert (child.returncode, err) == (0, "")
    assert json.loads(out)["gpu"] == "a10g" and plot.stat().st_size > 0
    assert list(temporary.iterdir()) == []


def test_version(capsys):
    from lilou import __version__

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr() == (f"lilou {__version__}\n", "")


def test_help_names_the_environment_variables_lilou_reads(capsys):
    """LILOU_DATA_DIR, LILOU_CHECKPOINTS, LILOU_CACHE_DIR and LILOU_DEBUG were named only in README and errors."""
    import re
    from pathlib import Path

    import lilou

    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    source = "\n".join(p.read_text() for p in Path(lilou.__file__).parent.rglob("*.py"))
    read = set(re.findall(r"LILOU_[A-Z_]+", source)) - {"LILOU_SERVE_SETTINGS"}  # serve's own, parent to workers
    assert read == {"LILOU_DATA_DIR", "LILOU_CHECKPOINTS", "LILOU_CACHE_DIR", "LILOU_DEBUG"}
    environment = out.split("environment:\n", 1)[1]
    assert all(f"  {name}" in environment for name in read)


@pytest.mark.parametrize(("argv", "message"), [
    (["--bogus"], "unrecognized arguments: --bogus"),  # was: the following arguments are required: COMMAND
    ([], "the following arguments are required: COMMAND"),
    (["infer"], "infer: the following arguments are required: model, --gpu"),
])
def test_usage_errors_are_one_line_with_one_prefix(argv, message, capsys):
    assert main(argv) == 2
    assert capsys.readouterr() == ("", f"lilou: error: {message}\n")


def test_a_model_named_like_an_option_is_hinted(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-model.onnx").write_bytes(RESNET18.read_bytes())
    assert main(["infer", "-model.onnx", "--gpu", "a10g"]) == 2
    assert capsys.readouterr().err == ("lilou: error: infer: the following arguments are required: model (-model.onnx is "
                                       "read as an option: write ./-model.onnx, or put -- before it)\n")
    assert main(["infer", "--gpu", "a10g", "--format", "json", "--", "-model.onnx"]) == 0


@pytest.mark.parametrize("output", [["--format", "json"], []])
def test_a_closed_stdout_is_a_write_error_in_one_line(output):
    """`lilou infer ... >&-` (stdout closed when the process starts: Python's sys.stdout is None) was `internal error:
    AttributeError: 'NoneType' object has no attribute 'write'` and a traceback even without LILOU_DEBUG; it is the
    one line of `> /dev/full`, exit 1."""
    child = _console_script("infer", str(RESNET18), "--gpu", "a10g", *output, preexec_fn=lambda: os.close(1))
    out, err = child.communicate(timeout=300)
    assert (child.returncode, out, err) == (1, "", "lilou: error: cannot write output (stdout is closed)\n")


def test_a_closed_stdout_in_process(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", None)
    assert main(["gpus", "t4", "--format", "json"]) == 1
    assert sys.stdout is None  # as it was
    assert capsys.readouterr().err == "lilou: error: cannot write output (stdout is closed)\n"
