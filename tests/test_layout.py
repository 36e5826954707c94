"""The import arrows of DESIGN.md: data flows one way, ONNX -> graph -> fusion -> latency -> (llm, plan) -> CLI/HTTP."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

LILOU = Path(__file__).resolve().parents[1] / "lilou"
#: Each folder and the lilou packages it must not import (stages further down the pipeline, or beside it).
FORBIDDEN = {
    "latency/kernel_model": ("lilou.latency.composition", "lilou.latency.evaluation", "lilou.llm", "lilou.plan",
                             "lilou.serve", "lilou.api", "lilou.commands", "lilou.cli"),
    "latency/composition": ("lilou.latency.evaluation", "lilou.llm", "lilou.plan", "lilou.serve", "lilou.api",
                            "lilou.commands", "lilou.cli"),
    "latency/evaluation": ("lilou.llm", "lilou.plan", "lilou.serve", "lilou.commands", "lilou.cli"),
    "graph": ("lilou.fusion", "lilou.latency", "lilou.llm", "lilou.plan", "lilou.serve", "lilou.api"),
    "fusion": ("lilou.latency", "lilou.llm", "lilou.plan", "lilou.serve", "lilou.api"),
    # measurement imports no model code (DESIGN.md): the kernel-table schema it writes, the zoo's architectures
    "profile": ("lilou.graph", "lilou.fusion", "lilou.latency", "lilou.llm", "lilou.plan", "lilou.serve", "lilou.api",
                "lilou.commands", "lilou.cli", "lilou.research"),
}


def imported(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_imports_point_down_the_pipeline(folder: str) -> None:
    files = sorted((LILOU / folder).rglob("*.py"))
    assert files
    offenders = [(p.relative_to(LILOU).as_posix(), name) for p in files for name in imported(p)
                 if name.startswith(FORBIDDEN[folder])]
    assert offenders == []


def test_latency_has_only_its_three_stages() -> None:
    """lilou/latency holds the three stage subpackages, each with a docstring, and no loose module."""
    latency = LILOU / "latency"
    assert sorted(p.name for p in latency.glob("*.py")) == ["__init__.py"]
    stages = sorted(p.name for p in latency.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert stages == ["composition", "evaluation", "kernel_model"]
    for stage in stages:
        assert ast.get_docstring(ast.parse((latency / stage / "__init__.py").read_text())), stage


def test_package_tracks_only_code_and_small_data_files() -> None:
    """Nothing a script writes (an exported model, a fold's output) is committed inside the package: session 26
    found a 4.5 MB ONNX export and a fold result under lilou/ from a path that once resolved to the package."""
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "lilou"], cwd=LILOU.parent, capture_output=True, text=True,
                             check=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    allowed = {".py", ".json", ".yaml", ".html", ".css", ".js"}
    odd = [p for p in tracked if Path(p).suffix not in allowed]
    big = [p for p in tracked if (LILOU.parent / p).exists() and (LILOU.parent / p).stat().st_size > 512 * 1024]
    stray = [p for p in tracked if Path(p).parts[1] in ("datasets", "outputs", "checkpoints")]
    assert (odd, big, stray) == ([], [], [])
