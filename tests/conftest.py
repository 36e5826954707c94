"""Shared fixtures: the real data mirror and zoo models exported once per test session."""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

# The CLI runs numpy's BLAS on one thread (lilou/cli.py); so do the tests, whose in-process predictions are compared
# with the CLI's and the service's byte for byte (a threaded BLAS sums in another order: a last-digit difference
# that a 4-decimal rounding can show). Set before numpy is imported by any test module.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def load_script(name: str, register: bool = False) -> ModuleType:
    """``scripts/<name>.py`` as a module (the scripts are not a package), under a test-only name. ``register``: in
    ``sys.modules`` too, for a script whose dataclasses look their module up there (the caller removes it)."""
    spec = importlib.util.spec_from_file_location(f"_test_script_{name}", REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def checkpoint_root_replacing(tmp_path: Path, name: str, replace: Path | None = None) -> Path:
    """A ``LILOU_CHECKPOINTS`` root: a copy of the shipped folders, ``name`` replaced by ``replace`` (a folder) or
    left out."""
    root = tmp_path / "root"
    shutil.copytree(REPO / "checkpoints", root)
    shutil.rmtree(root / name)
    if replace is not None:
        shutil.copytree(replace, root / name)
    return root


def shared_datasets_dir() -> Path | None:
    """The local mirror of real measurements (CI: ../shared/datasets), or None."""
    candidates = [os.environ.get("LILOU_DATA_DIR"), REPO.parent / "shared" / "datasets"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "neusight").is_dir():
            # absolute: `make test` exports ../shared/datasets, and a test that links a source into a temporary
            # folder (tests/test_kernel_table.py) made a link that pointed nowhere from there
            return Path(candidate).resolve()
    return None


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    path = shared_datasets_dir()
    if path is None:
        pytest.skip("real datasets not found: set LILOU_DATA_DIR to a mirror such as ../shared/datasets")
    return path


@pytest.fixture(scope="session")
def zoo_onnx(tmp_path_factory):
    """Export a zoo model once per session, weight-free unless asked: ``zoo_onnx("resnet50", batch=1)``."""
    from lilou.zoo.export import export_onnx

    cache: dict[tuple, Path] = {}
    folder = tmp_path_factory.mktemp("zoo")

    def get(name: str, **options) -> Path:
        options.setdefault("strip_weights", True)  # weights never matter to Lilou
        key = (name, tuple(sorted(options.items())))
        if key not in cache:
            stem = "-".join([name] + [f"{k}{v}" for k, v in sorted(options.items())])
            cache[key] = export_onnx(name, folder / f"{stem}.onnx", **options)
        return cache[key]

    return get


@pytest.fixture
def graph_work(monkeypatch) -> dict[str, int]:
    """Counts of ONNX files read (shape inference) and fusion predictions while a test runs: {"load": n, "fuse": m}.
    A read is a file shaped (lilou.graph.reading: in its child process or in this one)."""
    import lilou.fusion.predict
    from lilou.graph.reading import GraphReading

    calls = {"load": 0, "fuse": 0}
    shaped, fuse = GraphReading.shaped, lilou.fusion.predict.predict_partition

    def counted_read(self, *args, **kwargs):
        calls["load"] += self._shaped is None
        return shaped(self, *args, **kwargs)

    def counted_fuse(*args, **kwargs):
        calls["fuse"] += 1
        return fuse(*args, **kwargs)

    monkeypatch.setattr(GraphReading, "shaped", counted_read)
    monkeypatch.setattr(lilou.fusion.predict, "predict_partition", counted_fuse)
    return calls
