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
