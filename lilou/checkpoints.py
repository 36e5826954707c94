"""Where the shipped trained models live.

Checkpoints are folders under ``checkpoints/`` at the repository root, each with
its weights, ``config.json`` and ``metrics.json``; an installed wheel carries the same folders as the package
``lilou._shipped_checkpoints`` (setup.py maps it to ``checkpoints/``). ``LILOU_CHECKPOINTS`` points
elsewhere (e.g. at a freshly trained set): a root holding any of the folders below. A folder it lacks is the
shipped one, and every prediction says so (:func:`checkpoint_notes`): a root with only a new ``kernel_latency``
priced tensor-core kernels with the FP32 model and fused by rules instead of the GNN, unsaid. A folder that is there
but lacks a file (a half-copied one) is an error naming the file.
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lilou.errors import LilouInputError, MissingDataError, one_line

KERNEL_LATENCY = "kernel_latency"
#: GEMMs and convolutions off the FP32 CUDA cores (BF16 tensor cores ...): trained on the whole kernel table.
KERNEL_LATENCY_TENSOR = "kernel_latency_tensor"
FUSION_GNN = "fusion_gnn"
FUSION_RULES = "fusion_rules"
#: The end-to-end fallback and overhead constants (``lilou.latency.composition.overhead.E2E_OVERHEAD``).
E2E_OVERHEAD = "e2e_overhead"


def _shipped_root() -> Path:
    """A checkout's (or editable install's) ``checkpoints/`` beside the package; else the installed package's copy."""
    package = Path(__file__).resolve().parent
    checkout, installed = package.parent / "checkpoints", package / "_shipped_checkpoints"
    if in_checkout() and checkout.is_dir():
        return checkout
    if not installed.is_dir() and (package.parent / "pyproject.toml").is_file() and checkout.is_dir():
        return checkout  # an unpacked sdist (no Makefile), run or installed in place (`pip install -e`)
    return installed


def in_checkout() -> bool:
    """Whether the package runs from a source checkout (its Makefile beside it) rather than an installed wheel."""
    return (Path(__file__).resolve().parent.parent / "Makefile").is_file()


#: The shipped checkpoints (the repository's, or the wheel's copy of them), whatever ``LILOU_CHECKPOINTS`` says.
SHIPPED_ROOT = _shipped_root()
#: The target that makes each checkpoint (one message for all sent the e2e constants to `make train-kernels`).
REMEDY = {KERNEL_LATENCY: "`make train-kernels`", KERNEL_LATENCY_TENSOR: "`make train-kernels`",
          FUSION_GNN: "`make fusion-data && make train-fusion`", FUSION_RULES: "`make train-fusion`",
          E2E_OVERHEAD: "`make fit-e2e`"}


def make_remedy(command: str) -> str:
    """A remedy that runs `make` (``command``, e.g. "`make train-fusion`"): as it is in a source checkout; an installed
    package has no Makefile, so there it names the checkout it needs."""
    return command if in_checkout() else f"{command} in a lilou source checkout"


def _remedy(name: str) -> str:
    """How to get checkpoint ``name`` back: the make target in a checkout, a reinstall for an installed wheel."""
    if in_checkout():
        return f"train it with {REMEDY.get(name, '`make train-kernels`')}"
    return "reinstall lilou (its wheel ships the checkpoints)"


def checkpoints_root() -> Path:
    override = os.environ.get("LILOU_CHECKPOINTS")
    if override:
        return Path(override)
    return SHIPPED_ROOT


def shipped_checkpoint_path(name: str) -> Path:
    """The repository's folder of checkpoint ``name``, whatever ``LILOU_CHECKPOINTS`` says."""
    return SHIPPED_ROOT / name


def _substituted(name: str) -> bool:
    """Whether ``LILOU_CHECKPOINTS`` lacks folder ``name`` and the shipped one stands in for it."""
    root = checkpoints_root()
    return not (root / name).exists() and (SHIPPED_ROOT / name).exists() and root.resolve() != SHIPPED_ROOT.resolve()


def checkpoint_path(name: str, required: bool = True) -> Path:
    """Folder of checkpoint ``name`` under :func:`checkpoints_root`; the shipped one where ``LILOU_CHECKPOINTS``
    lacks it (:func:`checkpoint_notes` says so); with ``required`` a clear error when neither has it."""
    if _substituted(name):
        return SHIPPED_ROOT / name
    path = checkpoints_root() / name
    if required and not path.exists():
        raise missing_checkpoint(name, path)
    return path


def missing_checkpoint(name: str, path: Path) -> MissingDataError:
    """The error for checkpoint ``name`` absent at ``path``, naming what makes it."""
    return MissingDataError(f"checkpoint {name!r} not found at {path}; {_remedy(name)} "
                            "or set LILOU_CHECKPOINTS to a folder that has it")


def checkpoint_notes(names: tuple[str, ...] = (KERNEL_LATENCY, KERNEL_LATENCY_TENSOR, FUSION_GNN, FUSION_RULES,
                                              E2E_OVERHEAD)) -> list[str]:
    """One warning naming the folders of ``names`` that ``LILOU_CHECKPOINTS`` lacks, the shipped ones used instead
    (none without ``LILOU_CHECKPOINTS``)."""
    missing = [name for name in names if _substituted(name)]
    if not missing:
        return []
    return [f"LILOU_CHECKPOINTS={checkpoints_root()} has no {', '.join(missing)}: the shipped "
            f"{', '.join(f'checkpoints/{name}' for name in missing)} "
            f"{'is used in its place' if len(missing) == 1 else 'are used in their place'}"]


#: How each checkpoint folder is named in the error for a folder of another kind given in its place.
_FOLDER_WORDS = {KERNEL_LATENCY: "a kernel-latency checkpoint (checkpoints/kernel_latency or kernel_latency_tensor)",
                 FUSION_GNN: "a fusion GNN checkpoint (checkpoints/fusion_gnn)",
                 FUSION_RULES: "the fusion rule tables (checkpoints/fusion_rules)",
                 E2E_OVERHEAD: "the end-to-end overhead constants (checkpoints/e2e_overhead)"}


def folder_kind(folder: Path, config: object = None) -> str | None:
    """Which checkpoint folder (KERNEL_LATENCY, FUSION_GNN, ...) ``folder`` seems to hold, by ``config`` (its
    config.json, already read) and its files; None when it looks like none."""
    if isinstance(config, dict) and "kernel_types" in config:
        return KERNEL_LATENCY
    if isinstance(config, dict) and "architecture" in config and "backends" in config:
        return FUSION_GNN
    if (folder / "model.json").exists() or (isinstance(config, dict) and "kernel_checkpoint" in config):
        return E2E_OVERHEAD
    if (folder / "eager.json").exists() or (folder / "tvm.json").exists():
        return FUSION_RULES
    return None


def looks_like(folder: Path, config: object = None, expected: str | None = None) -> str:
    """"; it looks like ..." naming what :func:`folder_kind` finds, for the error when ``folder`` is given as a
    checkpoint of another kind than ``expected``; "" when it looks like none, or like ``expected`` (a damaged one)."""
    found = folder_kind(folder, config)
    return f"; it looks like {_FOLDER_WORDS[found]}" if found and found != expected else ""

@dataclass(frozen=True)
class FusionCheckpoints:
    """The fusion GNN and rule folders as resolved at one moment (``LILOU_CHECKPOINTS`` then, or the shipped ones):
    a :class:`lilou.api.Predictor` resolves them at construction, as it does its kernel checkpoints, and fuses with
    them for its whole life; the loaded models are cached per folder (:mod:`lilou.fusion.predict`). One cache for the
    whole process once let the first root read win: a Predictor made after ``LILOU_CHECKPOINTS`` changed priced
    with the new kernel models and fused with the old GNN (audit ua43c, finding 1)."""

    gnn: Path
    rules: Path

    @classmethod
    def current(cls) -> FusionCheckpoints:
        return cls(checkpoint_path(FUSION_GNN, required=False).absolute(),
                   checkpoint_path(FUSION_RULES, required=False).absolute())


@contextlib.contextmanager
def reading_checkpoints(*folders: str | os.PathLike[str]) -> Iterator[None]:
    """Loading checkpoints from ``folders``: a file there that cannot be parsed (a truncated copy, a half-written
    volume) is one line naming it and ``LILOU_CHECKPOINTS`` (exit status 2), as a missing checkpoint is, where the
    loader's own error (``SafetensorError``, ``JSONDecodeError``) named no file. Any other error is left alone."""
    try:
        yield
    except LilouInputError:
        raise
    except Exception:
        corrupt = _first_corrupt_file(folders)
        if corrupt is None:
            raise
        path, why = corrupt
        restore = "restore it from the repository's checkpoints/" if in_checkout() else "reinstall lilou"
        raise LilouInputError(f"checkpoint file {path} cannot be read ({why}): {restore} or set "
                              "LILOU_CHECKPOINTS to a folder with intact checkpoints") from None


def _first_corrupt_file(folders) -> tuple[Path, str] | None:
    """The first JSON or safetensors file in ``folders`` (each a checkpoint folder, or one file) that does not parse,
    with why."""
    for folder in map(Path, folders):
        files = sorted(folder.iterdir()) if folder.is_dir() else [folder]
        for path in files:
            if not path.is_file():
                continue
            try:
                if path.suffix == ".json":
                    json.loads(path.read_text(encoding="utf-8"))
                elif path.suffix == ".safetensors":
                    from safetensors import safe_open

                    with safe_open(str(path), framework="numpy") as weights:
                        for key in weights.keys():  # noqa: SIM118 - a safe_open handle is not iterable
                            weights.get_tensor(key)
            except Exception as exc:  # noqa: BLE001 - any failure to parse is the file's
                return path, f"{type(exc).__name__}: {one_line(exc)}"
    return None
