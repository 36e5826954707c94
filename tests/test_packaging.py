"""Lilou as an installed package, not a checkout (audit ua42f): the wheel carries the trained checkpoints and
predicts from outside the repository as the checkout does; messages name what an installed user can do."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from lilou.errors import MissingDataError
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "resnet18.onnx"


def _tracked(*paths: str) -> list[str]:
    done = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", *paths], cwd=REPO, capture_output=True,
                          text=True, check=True)
    return [line for line in done.stdout.splitlines() if (REPO / line).exists()]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A copy of the repository's files (as from `git archive`: no untracked build output)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    pytest.importorskip("setuptools", minversion="77")  # pyproject's build requirement: these builds are not isolated
    source = tmp_path_factory.mktemp("source")
    for name in _tracked():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    return source


@pytest.fixture(scope="module")
def wheel(source, tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(dist)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (path,) = dist.glob("lilou-*.whl")
    return path


def test_the_wheel_carries_every_checkpoint_file(wheel):
    """They were in neither the wheel nor the sdist: every prediction failed from an installed package."""
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = [name.replace("checkpoints/", "lilou/_shipped_checkpoints/", 1) for name in _tracked("checkpoints")]
    assert len(shipped) >= 15
    assert [name for name in shipped if name not in names] == []


def test_an_installed_wheel_predicts_as_the_checkout_does(wheel, tmp_path):
    """`lilou infer` from another folder, no LILOU_CHECKPOINTS: the checkout's prediction, byte for byte; and `fuse`
    uses the GNN (it fell back to the rule baseline, unsaid)."""
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
                           str(site), str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(EXAMPLE, work / "resnet18.onnx")
    env = {key: value for key, value in os.environ.items() if key != "LILOU_CHECKPOINTS"}

    def lilou(pythonpath, *args):
        run = subprocess.run([sys.executable, "-m", "lilou.cli", *args], cwd=work, capture_output=True, text=True,
                             env={**env, "PYTHONPATH": str(pythonpath)}, timeout=300)
        assert run.returncode == 0, run.stderr
        return run.stdout

    probe = subprocess.run([sys.executable, "-c", "import lilou.checkpoints as c; print(c.__file__, c.SHIPPED_ROOT)"],
                           cwd=work, capture_output=True, text=True, env={**env, "PYTHONPATH": str(site)}, check=True)
    assert probe.stdout.split() == [str(site / "lilou" / "checkpoints.py"), str(site / "lilou" / "_shipped_checkpoints")]
    infer = ("infer", "resnet18.onnx", "--gpu", "a10g", "--format", "json")
    assert lilou(site, *infer) == lilou(REPO, *infer)
    fused = json.loads(lilou(site, "fuse", "resnet18.onnx", "--format", "json"))
    assert fused["source"] == json.loads(lilou(REPO, "fuse", "resnet18.onnx", "--format", "json"))["source"]
    assert "gnn" in fused["source"].lower()


#: A `docs/<name>.md` that the package's text names (not a URL's /docs/ path).
DOC_PATH = re.compile(r"(?<![\w/.-])docs/([\w.-]+\.md)")


def test_every_document_the_package_cites_is_in_docs():
    """Messages (through lilou.docs.doc), help, comments and the web page name docs that exist: a renamed document
    fails here, not in a user's hands."""
    cited: dict[str, set[str]] = {}
    for name in _tracked("lilou"):
        if name.endswith((".py", ".html", ".json", ".yaml")):
            text = (REPO / name).read_text(encoding="utf-8")
            for doc in {*DOC_PATH.findall(text), *re.findall(r"\bdoc\(['\"]([\w.-]+)['\"]\)", text)}:
                cited.setdefault(doc, set()).add(name)
    assert {doc: names for doc, names in cited.items() if not (REPO / "docs" / doc).is_file()} == {}
    assert {"intervals.md", "kernel_model.md", "service.md", "llm.md", "fusion.md"} <= set(cited)


def test_an_installed_wheel_names_the_documents_it_carries(wheel, tmp_path):
    """Warnings and help said `docs/intervals.md`, a folder the wheel did not have: it carries docs/*.md as
    lilou/_docs now and an installed package's messages give that copy's path."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert [doc for doc in _tracked("docs") if doc.endswith(".md") and doc.count("/") == 1
            and doc.replace("docs/", "lilou/_docs/", 1) not in names] == []
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
                           str(site), str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    installed = site / "lilou" / "_docs" / "intervals.md"
    assert installed.read_bytes() == (REPO / "docs" / "intervals.md").read_bytes()

    def mig_warnings(pythonpath):
        run = subprocess.run([sys.executable, "-m", "lilou.cli", "infer", str(EXAMPLE), "--gpu", "a100-40gb", "--mig",
                              "1g.5gb", "--format", "json"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(pythonpath)})
        assert run.returncode == 0, run.stderr
        return [line for line in json.loads(run.stdout)["warnings"] if "no source measured a MIG slice" in line]

    (checkout,) = mig_warnings(REPO)
    assert checkout.endswith("measurements (docs/intervals.md)")
    assert mig_warnings(site) == [checkout.replace("docs/intervals.md", str(installed))]


def test_a_checkout_uses_its_own_checkpoints_folder():
    from lilou.checkpoints import SHIPPED_ROOT, in_checkout

    assert in_checkout()
    assert SHIPPED_ROOT == REPO / "checkpoints"


def test_an_installed_package_names_a_reinstall_not_a_make_target(tmp_path, monkeypatch):
    """`make train-kernels` is no use without the repository."""
    import lilou.checkpoints as checkpoints

    monkeypatch.setattr(checkpoints, "in_checkout", lambda: False)
    monkeypatch.setattr(checkpoints, "SHIPPED_ROOT", tmp_path / "shipped")
    monkeypatch.setenv("LILOU_CHECKPOINTS", str(tmp_path / "root"))
    with pytest.raises(MissingDataError, match=re.escape("checkpoint 'kernel_latency' not found at "
                                                         f"{tmp_path}/root/kernel_latency; reinstall lilou (its wheel "
                                                         "ships the checkpoints) or set LILOU_CHECKPOINTS")) as error:
        checkpoints.checkpoint_path("kernel_latency")
    assert "make" not in str(error.value)


# ------------------------------------------------------------------ the base install: no extra's module is imported
#: The modules of the extras (pyproject.toml: train, zoo, tvm), which a base install lacks.
EXTRA_MODULES = ("torch", "torch_geometric", "lightning", "lightning_fabric", "pytorch_lightning", "hydra", "omegaconf",
                 "tensorboard", "transformers", "onnxscript", "tvm")
BLOCKER = f"""
import os
import sys
from importlib.abc import MetaPathFinder

class Blocked(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {EXTRA_MODULES!r}:
            with open(os.environ["LILOU_TEST_BLOCKED"], "a") as log:  # a caught ImportError is still a try
                log.write(name + "\\n")
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
        return None

sys.meta_path.insert(0, Blocked())
from lilou.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _without_extras(*args: str, cwd=REPO) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The command's run with the extras' modules blocked, and the modules it tried to import all the same."""
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "blocked"
        done = subprocess.run([sys.executable, "-c", BLOCKER, *args], cwd=cwd, capture_output=True, text=True,
                              timeout=300, env={**os.environ, "LILOU_TEST_BLOCKED": str(log)})
        tried = log.read_text().split() if log.exists() else []
    return done, tried


@pytest.mark.parametrize("args", [
    ("infer", str(EXAMPLE), "--gpu", "a10g", "--format", "json"),
    ("infer", str(EXAMPLE), "--gpu", "a10g", "--backend", "tvm", "--format", "json"),
    ("rank", str(EXAMPLE), "--gpus", "t4,a10g", "--format", "json"),
    ("plan", str(EXAMPLE), "--slo-ms", "50", "--gpus", "t4,a10g", "--format", "json"),
    ("llm", "llama-3.1-8b", "--gpu", "l4", "--input-len", "512", "--output-len", "128", "--format", "json"),
    ("gpus",), ("graph", str(EXAMPLE)),
    ("fuse", str(EXAMPLE), "--format", "json"),
], ids=lambda args: "-".join(args[:1] + tuple(a for a in args[1:] if a in ("tvm",))))
def test_prediction_commands_need_no_extra(args):
    """torch, lightning, hydra, transformers and TVM are extras now: every prediction command runs without them
    (was: test_intervals.test_plan_and_infer_do_not_import_torch, which only checked sys.modules)."""
    done, tried = _without_extras(*args)
    assert done.returncode == 0, done.stderr
    assert tried == []
    if args[0] == "fuse":
        assert json.loads(done.stdout)["source"] == "gnn"  # not the rule baseline


@pytest.mark.parametrize(("args", "extra"), [
    (("zoo", "export", "resnet18", "-o", "{tmp}/r.onnx", "--strip-weights"), "zoo"),
])
def test_a_command_that_needs_an_extra_names_it_in_one_line(args, extra, tmp_path):
    """It was `lilou: internal error: ModuleNotFoundError ...` with exit status 1."""
    done, tried = _without_extras(*(arg.format(tmp=tmp_path) for arg in args))
    assert tried and done.returncode == 2, done.stderr
    assert done.stderr == (f"lilou: error: {args[0]} needs torch, which lilou's base install leaves out: "
                           f"pip install 'lilou[{extra}]'\n")


def test_the_zoo_catalogue_needs_no_torch():
    """`lilou zoo list` printed the install hint: listing imported torch (only building a model needs it)."""
    done, tried = _without_extras("zoo", "list", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert tried == []
    entries = {entry["name"]: entry for entry in json.loads(done.stdout)}
    assert len(entries) == 130
    assert [entry["family"] for entry in entries.values()].count("decomp") == 86
    assert entries["resnet18"] == {"name": "resnet18", "family": "resnet", "kind": "vision", "batch": 1, "seq": None,
                                   "image_size": 224,
                                   "description": "ResNet-18 (ResNetForImageClassification, basic blocks)"}
    assert (entries["gpt3_27"]["batch"], entries["gpt3_27"]["seq"]) == (2, 2048)
    assert entries["randdag-0"]["image_size"] == 64 and entries["nas201-0"]["image_size"] == 32
    assert entries["lin-cross-entropy"]["batch"] == 12


@pytest.mark.parametrize("args", [("zoo", "export", "resnet1", "-o", "{tmp}/r.onnx"),
                                  ("profile", "model", "resnet1", "--device", "cpu", "--out", "{tmp}/p")])
def test_an_unknown_zoo_name_is_named_before_torch_is_missed(args, tmp_path):
    """Without torch, a typo was answered with `pip install 'lilou[zoo]'`; installing it would not have helped."""
    done, tried = _without_extras(*(arg.format(tmp=tmp_path) for arg in args))
    assert (done.returncode, tried) == (2, [])
    assert done.stderr == "lilou: error: unknown zoo model 'resnet1'; did you mean resnet18, resnet50, regnety-400mf?\n"


def _help_of_every_command() -> list[tuple[str, ...]]:
    from lilou.commands import COMMANDS

    actions = {"zoo": ("list", "export"), "data": ("list", "fetch", "verify", "add"), "profile": ("ops", "model", "check")}
    return [("--help",), *((name, "--help") for name in COMMANDS),
            *((name, action, "--help") for name, names in actions.items() for action in names)]


@pytest.mark.parametrize("args", [*_help_of_every_command(), ("gpus", "--format", "json"), ("profile", "check")],
                         ids=lambda args: "-".join(arg.lstrip("-") for arg in args if arg != "json"))
def test_commands_that_do_not_need_an_extra_by_nature_never_import_one(args, tmp_path):
    """Help, listings and `profile check` of a label beside its ONNX model import none of torch, lightning,
    transformers, hydra or TVM, not even in a `try` (the blocker logs every attempt)."""
    if args == ("profile", "check"):
        label = tmp_path / "t4-resnet18"
        label.mkdir()
        shutil.copy(EXAMPLE, label / "model.onnx")
        (label / "label.json").write_text(json.dumps({
            "format": 1, "model": "resnet18", "batch": 1, "seq": None, "image_size": 224, "dtype": "fp32",
            "tf32": "off", "latency_ms": 3.0, "timing": "cuda-events-eager", "device": {"name": "Tesla T4", "kind": "cuda"},
            "note": "test fixture: import hygiene, not a measurement"}))
        args = (*args, str(label), "--format", "json")
    done, tried = _without_extras(*args)
    assert (done.returncode, tried) == (0, []), done.stderr
    if "--help" in args:
        assert done.stdout.startswith("usage: lilou")
    elif args[0] == "profile":
        (row,) = json.loads(done.stdout)
        infer, _ = _without_extras("infer", str(label / "model.onnx"), "--gpu", "Tesla T4", "--tf32", "off",
                                   "--format", "json")
        assert row["predicted_ms"] == json.loads(infer.stdout)["latency_ms"] and row["measured_ms"] == 3.0
    else:
        assert "a10g" in {gpu["name"] for gpu in json.loads(done.stdout)}


def test_the_extra_of_each_missing_module():
    from lilou.cli import _extra_for

    def missing(name):
        return ModuleNotFoundError(f"No module named {name!r}", name=name)

    assert _extra_for(missing("torch.nn"), "zoo") == "zoo"
    assert _extra_for(missing("torch"), "eval") == "train,zoo"
    assert _extra_for(missing("lightning"), "eval") == "train,zoo"
    assert _extra_for(missing("hydra"), "train") == "train"
    assert _extra_for(missing("transformers"), "infer") == "zoo"
    assert _extra_for(missing("tvm"), "eval") == "tvm"
    assert _extra_for(missing("numpy"), "infer") is None  # a base dependency missing: an internal error
    assert _extra_for(ImportError("cannot import name 'x' from 'torch'", name="torch"), "zoo") is None


def test_python_dash_m_lilou_is_the_command():
    """It failed: No module named lilou.__main__."""
    done = subprocess.run([sys.executable, "-m", "lilou", "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("lilou ")
    done = subprocess.run([sys.executable, "-m", "lilou", "gpus", "--bogus"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("lilou: error: ")


def test_make_targets_in_messages_name_the_checkout_they_need_when_installed(tmp_path, monkeypatch):
    """An installed package has no Makefile: `make calibrate` alone is no use there (audit ua42f, finding 5)."""
    import lilou.checkpoints as checkpoints
    from lilou.plan import calibration

    assert checkpoints.make_remedy("`make calibrate`") == "`make calibrate`"  # a checkout
    monkeypatch.setattr(checkpoints, "in_checkout", lambda: False)
    assert checkpoints.make_remedy("`make calibrate`") == "`make calibrate` in a lilou source checkout"
    with pytest.raises(MissingDataError, match="interval calibration .* not found; reinstall lilou$"):
        calibration._load(str(tmp_path / "calibration.json"))


def test_the_sdist_has_the_checkpoints_and_the_license_but_no_tests(source, wheel, tmp_path):
    """Its tests could not run (no tests/data, no scripts/); no LICENSE anywhere though the project is Apache-2.0."""
    done = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                           "print(b.build_sdist(sys.argv[1]))", str(tmp_path)], cwd=source, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "deprecated" not in done.stderr  # project.license as a TOML table
    import tarfile

    with tarfile.open(tmp_path / done.stdout.split()[-1]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert "LICENSE" in names and "setup.py" in names
    assert {name for name in _tracked("checkpoints")} <= names
    assert not any(name.startswith("tests") for name in names)
    with zipfile.ZipFile(wheel) as archive:
        assert "lilou-0.1.0.dist-info/licenses/LICENSE" in archive.namelist()
        assert "License-Expression: Apache-2.0" in archive.read("lilou-0.1.0.dist-info/METADATA").decode()
    assert (REPO / "LICENSE").read_text().split()[:4] == ["Apache", "License", "Version", "2.0,"]


def test_an_installed_eval_writes_to_the_cache_folder_not_site_packages(tmp_path):
    """`lilou eval --no-logo` wrote datasets/e2e_models and outputs/logo inside site-packages (read-only: it failed)."""
    probe = ("import lilou.checkpoints as c; c.in_checkout = lambda: False\n"
             "import inspect\n"
             "from lilou.latency.evaluation import e2e_eval, e2e_workloads, fold_parts\n"
             "defaults = inspect.signature(e2e_eval.evaluate).parameters\n"
             "print(defaults['models_dir'].default, defaults['cache_dir'].default)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LILOU_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(tmp_path / "e2e_models"), str(tmp_path / "logo")]


def test_a_checkout_eval_keeps_its_folders():
    from lilou.latency.evaluation.e2e_workloads import MODELS_DIR
    from lilou.latency.evaluation.fold_parts import LOGO_DIR

    assert (MODELS_DIR, LOGO_DIR) == (REPO / "datasets" / "e2e_models", REPO / "outputs" / "logo")


def test_leave_one_gpu_out_eval_without_conf_is_one_line(monkeypatch, tmp_path):
    """It was two lines of hydra's (Primary config directory not found ...) and exit status 1."""
    from lilou.errors import LilouInputError
    from lilou.latency.evaluation import fold_parts

    monkeypatch.setattr(fold_parts, "REPO", tmp_path)
    with pytest.raises(LilouInputError, match=r"source checkout \(its conf/\).*use --no-logo$"):
        fold_parts.kernel_config(["t4"])
