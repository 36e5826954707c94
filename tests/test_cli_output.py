"""What the table format writes on streams automation uses: an ASCII-only stdout, a pipe or a file."""
from __future__ import annotations

import io
import json
import shutil

from lilou.cli import main
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "resnet18.onnx"


def ascii_stdout(monkeypatch) -> io.TextIOWrapper:
    """stdout as PYTHONIOENCODING=ascii (or an ASCII locale) makes it; set in the test itself (pytest sets its
    own capture again when the test starts)."""
    stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii", newline="\n")
    monkeypatch.setattr("sys.stdout", stream)
    return stream


def _written(stream: io.TextIOWrapper) -> str:
    stream.flush()
    return stream.buffer.getvalue().decode("ascii")


def test_table_on_an_ascii_stdout_escapes_what_it_cannot_encode(tmp_path, monkeypatch, capsys):
    """A non-ASCII model name and Lilou's own ellipsis failed with an internal error (UnicodeEncodeError, exit 1)
    after part of the table was written."""
    model = tmp_path / "modèle ü.onnx"
    shutil.copy(EXAMPLE, model)
    stdout = ascii_stdout(monkeypatch)
    assert main(["infer", str(model), "--gpu", "a10g", "--top", "100"]) == 0
    out = _written(stdout)
    assert capsys.readouterr().err == ""
    assert f"{tmp_path}/mod\\xe8le \\xfc.onnx on a10g (eager, batch 1, FP32, TF32 conv): " in out
    # the cut node name is marked, with dots where the stream has no ellipsis
    assert "| node__native_batch_norm_legit_no_trai... |" in out
    assert "…" not in out and "node__native_batch_norm_legit_no_trainin " not in out


def test_shorten_marks_the_cut_in_the_stream_encoding(monkeypatch):
    from lilou.commands._common import ellipsis, shorten

    ascii_stdout(monkeypatch)
    assert (ellipsis(), shorten("abcdefgh", 6), shorten("abcdef", 6)) == ("...", "abc...", "abcdef")
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))
    assert (ellipsis(), shorten("abcdefgh", 6)) == ("…", "abcde…")


def test_piped_table_cuts_names_visibly_and_never_wraps_warnings(capsys, monkeypatch):
    """Piped, a node name was cut at 40 characters without a mark, and warnings were wrapped at 160 columns in
    mid-sentence (a `grep '^warning:'` got half a message)."""
    monkeypatch.delenv("COLUMNS", raising=False)  # 160 wide unless COLUMNS says otherwise
    argv = ["infer", str(EXAMPLE), "--gpu", "a10g", "--top", "100"]
    assert main([*argv, "--format", "json"]) == 0
    prediction = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("warning:")] == [f"warning: {w}" for w in prediction["warnings"]]
    assert any(len(line) > 160 for line in lines if line.startswith("warning:"))  # the case that was wrapped
    cut = [line for line in lines if "node__native_batch_norm" in line]
    assert cut and all("│ node__native_batch_norm_legit_no_traini… │" in line for line in cut)
    assert max(len(line) for line in lines if line.startswith(("┏", "│", "└"))) <= 160  # the table keeps its width
