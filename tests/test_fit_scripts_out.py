"""scripts/fit_recurrent.py and scripts/fit_transposed_conv.py take --out (audit ua42d, finding 10): they could only
overwrite the package's tracked JSON files."""
from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, load_script


def test_the_fit_scripts_write_where_out_says(tmp_path, datasets_dir, monkeypatch, capsys):
    monkeypatch.setenv("LILOU_DATA_DIR", str(datasets_dir))
    shipped = REPO / "lilou" / "latency" / "kernel_model" / "transposed_conv.json"
    before = shipped.read_bytes()
    load_script("fit_transposed_conv").main(["--out", str(tmp_path / "tc.json")])
    written = json.loads((tmp_path / "tc.json").read_text())
    assert written["command"] == f"python scripts/fit_transposed_conv.py --out {tmp_path / 'tc.json'}"
    assert written["ratio"] == json.loads(before)["ratio"]
    assert shipped.read_bytes() == before
    with pytest.raises(SystemExit):
        load_script("fit_recurrent").main(["--help"])
    assert "--out OUT" in capsys.readouterr().out


def test_build_llm_models_parses_its_arguments_before_writing(capsys):
    """scripts/build_llm_models.py read no arguments: `--help` (or a typo) regenerated lilou/llm/models.yaml."""
    shipped = REPO / "lilou" / "llm" / "models.yaml"
    before = shipped.stat().st_mtime_ns
    script = load_script("build_llm_models")
    with pytest.raises(SystemExit) as done:
        script.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ") and "Regenerate ``lilou/llm/models.yaml``" in out
    with pytest.raises(SystemExit) as done:
        script.main(["--out", "elsewhere.yaml"])
    assert done.value.code == 2
    assert "unrecognized arguments: --out elsewhere.yaml" in capsys.readouterr().err
    assert shipped.stat().st_mtime_ns == before
