"""A tensor-core checkpoint carries its coverage.json (audit ua42d, finding 2): training did not write it, and
`infer` stopped with "input/output failed", exit 1."""
from __future__ import annotations

import json

from lilou.cli import main
from tests.conftest import REPO, checkpoint_root_replacing

EXAMPLE = str(REPO / "examples" / "resnet18.onnx")


def test_a_missing_coverage_file_is_one_line_naming_the_script_that_writes_it(tmp_path, monkeypatch, capsys):
    root = checkpoint_root_replacing(tmp_path, "kernel_latency_tensor", REPO / "checkpoints" / "kernel_latency_tensor")
    (root / "kernel_latency_tensor" / "coverage.json").unlink()
    monkeypatch.setenv("LILOU_CHECKPOINTS", str(root))
    assert main(["infer", EXAMPLE, "--gpu", "t4", "--format", "json"]) == 2
    out, err = capsys.readouterr()
    folder = root / "kernel_latency_tensor"
    assert out == ""
    assert err == (f"lilou: error: {folder}/coverage.json missing: the tensor-core kernel model's measured coverage; "
                   f"write it with `python scripts/kernel_coverage.py --out {folder}`\n")


def test_training_writes_the_coverage_of_the_gpus_the_tensor_model_trained_on(tmp_path, datasets_dir):
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from lilou.latency.kernel_model.coverage import MeasuredCoverage, table_coverage
    from lilou.latency.kernel_model.table_datamodule import KernelTableDataModule
    from lilou.latency.kernel_model.training import write_table_coverage

    datamodule = KernelTableDataModule(data_dir=str(datasets_dir))
    predictor = SimpleNamespace(config={"kind": "kernel_latency_tensor", "trained_on": ["t4", "h200"]})
    run, shipped = tmp_path / "run", tmp_path / "ship"
    run.mkdir()
    shipped.mkdir()
    write_table_coverage(OmegaConf.create({"output_checkpoint": str(shipped)}), predictor, datamodule, run)
    for folder in (run, shipped):
        coverage = MeasuredCoverage.load(folder)
        assert {gpu for gpus in coverage.gpus.values() for gpu in gpus} == {"t4", "h200"}
    # every GPU: the file scripts/kernel_coverage.py wrote for the shipped model
    assert table_coverage(data_dir=datasets_dir)[0] == json.loads(
        (REPO / "checkpoints" / "kernel_latency_tensor" / "coverage.json").read_text())
    predictor.config["kind"] = "kernel_latency"  # the FP32 model has no coverage file
    write_table_coverage(OmegaConf.create({"output_checkpoint": None}), predictor, datamodule, tmp_path)
    assert not (tmp_path / "coverage.json").exists()
