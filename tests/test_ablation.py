"""Ablation scripts end to end on tiny configs, and seed determinism of a training run."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[1]


def _script(name: str):
    return load_script(name)


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_plot_resources_quick_is_monotone_across_mig_slices(tmp_path):
    """Shipped checkpoints on examples/resnet18.onnx: every MIG slice of A100-80GB and H100-SXM plus the GPU."""
    assert _script("plot_resources").main(["--quick", "--out", str(tmp_path)]) == 0
    rows = _rows(tmp_path / "plot_resources.csv")
    assert list(rows[0]) == ["model", "gpu", "slice", "sms", "bandwidth_gbs", "l2_mb", "memory_gb", "latency_ms",
                             "kernels", "monotone_violations"]
    profiles = ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "whole GPU"]
    assert [(r["gpu"], r["slice"]) for r in rows] == [(g, p) for g in ("a100-sxm4-80gb", "h100-sxm")
                                                      for p in profiles]
    assert {r["model"] for r in rows} == {"resnet18"}
    for gpu in ("a100-sxm4-80gb", "h100-sxm"):
        picked = [r for r in rows if r["gpu"] == gpu]
        assert int(picked[0]["sms"]) < int(picked[-1]["sms"])
        # More SMs, bandwidth and L2 never predicted slower; strictly faster from the smallest slice to the GPU.
        for a in picked:
            for b in picked:
                if all(float(a[k]) <= float(b[k]) for k in ("sms", "bandwidth_gbs", "l2_mb")):
                    assert float(a["latency_ms"]) >= float(b["latency_ms"]), (a, b)
        assert float(picked[0]["latency_ms"]) > float(picked[-1]["latency_ms"])
    assert all(r["monotone_violations"] == "0" for r in rows)
    meta = json.loads((tmp_path / "plot_resources.json").read_text())
    assert meta["command"].startswith("python") and meta["quick"] is True and meta["rows_not_monotone"] == 0
    assert len(meta["table"]["rows"]) == 16
    assert (tmp_path / "plot_resources.png").stat().st_size > 10_000


def test_ablate_kernels_tiny(tmp_path, datasets_dir, monkeypatch):
    """Every variant on one leave-one-GPU-out fold, 300 training rows, 1 epoch."""
    monkeypatch.setenv("LILOU_DATA_DIR", str(datasets_dir))
    module = _script("ablate_kernels")
    assert module.main(["--quick", "--max-rows", "300", "--folds", "p4", "--out", str(tmp_path)]) == 0
    rows = _rows(tmp_path / "ablate_kernels.csv")
    assert list(rows[0]) == ["variant", "ablation", "fold", "family", "n", "mape", "median_ape"]
    variants = [v for v, _, _ in module.VARIANTS]
    pooled = [r for r in rows if r["family"] == "all"]
    assert [r["variant"] for r in pooled] == [variants[0], "roofline baseline", *variants[1:]]
    assert {r["fold"] for r in rows} == {"p4"}
    # The held-out GPU's rows are the same test set for every variant, and the families add up to it.
    assert len({r["n"] for r in pooled}) == 1
    for variant in {r["variant"] for r in rows}:
        families = [r for r in rows if r["variant"] == variant and r["family"] != "all"]
        assert sum(int(r["n"]) for r in families) == int(pooled[0]["n"]) > 0
    assert all(float(r["mape"]) > 0 for r in rows)
    meta = json.loads((tmp_path / "ablate_kernels.json").read_text())
    assert meta["seed"] == 0 and "data.max_rows=300" in meta["overrides"]
    assert [r["variant"] for r in meta["table"]["rows"]] == [r["variant"] for r in pooled]
    assert (tmp_path / "ablate_kernels.png").exists()


@pytest.mark.parametrize("seed", [3])
def test_same_seed_same_metrics(datasets_dir, seed):
    """Two fits of one tiny kernel config with the same seed give identical held-out metrics (CPU)."""
    from lilou.latency.kernel_model.training import fit, held_out_metrics
    from lilou.research.ablation import cached_kernel_rows, compose, quiet_lightning

    cfg = compose(["experiment=kernel_latency", f"seed={seed}", f"data.data_dir={datasets_dir}",
                   "data.max_rows=400", "data.held_out_gpus=[p4]", "trainer.max_epochs=2",
                   "trainer.enable_progress_bar=false", "output_checkpoint=null"])
    runs = []
    with cached_kernel_rows(), quiet_lightning():
        for _ in range(2):
            predictor, datamodule = fit(cfg)
            val = datamodule.val_rows
            runs.append((held_out_metrics(predictor, datamodule),
                         predictor.predict(val.kernels, val.devices).latency_ms.tolist()))
    assert runs[0][0] and runs[0][0] == runs[1][0]
    assert runs[0][1] == runs[1][1]


def test_ablate_kernels_refuses_a_seed_override_it_would_not_record(capsys):
    """`... seed=5` trained with seed 5 while ablate_kernels.json recorded "seed": 0."""
    module = _script("ablate_kernels")
    with pytest.raises(SystemExit) as exited:
        module.main(["--quick", "--folds", "t4", "seed=5"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == ("ablate_kernels.py: error: override seed=5: give it as --seed (the script "
                                       "records that option's value; an override would win over it unrecorded)\n")


def test_result_json_records_the_paths_it_wrote(tmp_path):
    """With --out elsewhere the JSON still said outputs/results/<name>.csv."""
    import time

    from lilou.research.ablation import REPO as ROOT
    from lilou.research.ablation import write_result

    write_result("probe", [{"a": 1}], ["a"], title="t", seed=3, quick=True, data="d", started=time.perf_counter(),
                 out_dir=tmp_path)
    meta = json.loads((tmp_path / "probe.json").read_text())
    assert (meta["csv"], meta["png"], meta["seed"]) == (str(tmp_path / "probe.csv"), str(tmp_path / "probe.png"), 3)
    from lilou.research.ablation import result_path
    assert result_path(ROOT / "outputs" / "results" / "x.csv") == "outputs/results/x.csv"


def test_metrics_name_the_sources_a_run_read():
    from lilou.latency.kernel_model.datamodule import KernelDataModule
    from lilou.latency.kernel_model.table_datamodule import KernelTableDataModule
    from lilou.latency.kernel_model.training import describe_data

    assert describe_data(KernelTableDataModule(sources=["vidur"], per_group=10)) == (
        "kernel-measurement table, vidur (lilou.data.kernel_table), at most 10 rows per source, GPU, dtype and family")
    assert describe_data(KernelDataModule(ops=["conv"])) == (
        "NeuSight kernels/train (real measurements, FP32 PyTorch 2.1 eager), ops conv")


def test_ablate_fusion_trains_every_variant_on_the_train_split_alone(tmp_path, monkeypatch):
    """Review defect 1: the variants were composed from experiment=fusion_gnn (the shipped recipe, which trains on
    train, test, test-op and test-exporter) and then scored on the test split they had been trained on."""
    import lilou.fusion.benchmark as benchmark
    import lilou.fusion.training as training

    module = _script("ablate_fusion")
    seen = []

    class Stop(Exception):
        pass

    def fit(cfg):
        seen.append(cfg)
        raise Stop

    monkeypatch.setattr(module, "test_graphs", lambda root, backends, limit: {b: [] for b in backends})
    monkeypatch.setattr(benchmark, "tuned_rule_table", lambda root, backend: None)
    monkeypatch.setattr(benchmark, "score", lambda graphs, predict: {"all": {}})
    monkeypatch.setattr(training, "fit", fit)
    with pytest.raises(Stop):
        module.run(["seed=0", "trainer.max_epochs=1"], tmp_path, ["eager"], None, log=lambda *_: None)
    assert len(seen) == 1 and list(seen[0].data.train_splits) == ["train"]
    assert seen[0].output_checkpoint is None
    for _, _, extra in module.variants():  # no variant's overrides bring the test splits back
        assert list(module.variant_config(tmp_path, ["eager"], extra).data.train_splits) == ["train"]


def test_ablate_kernels_records_the_training_row_subsample_in_its_command(tmp_path, monkeypatch):
    """Review defect 11: results.md printed `python scripts/ablate_kernels.py` for a table whose "shipped" row trains on
    80,000 rows per fold, a default nobody could see."""
    module = _script("ablate_kernels")
    recorded = []
    monkeypatch.setattr(module, "run", lambda overrides, folds: [])
    monkeypatch.setattr(module, "summary", lambda results, folds: [])
    monkeypatch.setattr(module, "plot", lambda table, folds, path: None)
    monkeypatch.setattr(module, "write_result", lambda *args, **kwargs: recorded.append(kwargs))
    monkeypatch.setattr("sys.argv", ["scripts/ablate_kernels.py", "--folds", "p4"])
    assert module.main(["--folds", "p4", "--out", str(tmp_path)]) == 0
    assert recorded[0]["command"].endswith("--max-rows 80000")
    assert "data.max_rows=80000" in recorded[0]["extra"]["overrides"]
    monkeypatch.setattr("sys.argv", ["scripts/ablate_kernels.py", "--max-rows", "5000"])
    assert module.main(["--max-rows", "5000", "--folds", "p4", "--out", str(tmp_path)]) == 0
    assert recorded[1]["command"].count("--max-rows") == 1
    assert module.VARIANTS[0][0].startswith("shipped config") and "subsampled" in module.VARIANTS[0][0]
