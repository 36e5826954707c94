"""matplotlib for ``--plot``, without leaving files behind where its config folder cannot be written.

With a read-only (or missing) HOME, matplotlib makes a ``/tmp/matplotlib-XXXXXXXX`` folder for its font cache,
says so on stderr in several lines, and removes the folder in an ``atexit`` hook, which the command line's quick
exit (``os._exit``) skips: every ``--plot`` run from a cron job or container left one behind. Here Lilou points
``MPLCONFIGDIR`` at a temporary folder of its own in that case, and removes it itself (:func:`remove_config_dir`).
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

#: The temporary config folder made for this process, if any.
_made: list[str] = []


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display)."""
    if "matplotlib" not in sys.modules and not os.environ.get("MPLCONFIGDIR") and not _default_dirs_writable():
        folder = tempfile.mkdtemp(prefix="lilou-matplotlib-")
        os.environ["MPLCONFIGDIR"] = folder
        _made.append(folder)
        atexit.register(remove_config_dir)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def remove_config_dir() -> None:
    """Remove the temporary config folder :func:`pyplot` made (the command line calls it before a quick exit)."""
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)


def _default_dirs_writable() -> bool:
    """Whether matplotlib's own config and cache folders (XDG, else under HOME) exist or can be made, writable."""
    try:
        home = Path.home()
    except (KeyError, RuntimeError):  # no HOME and no passwd entry
        return False
    for variable, default in (("XDG_CONFIG_HOME", ".config"), ("XDG_CACHE_HOME", ".cache")):
        folder = Path(os.environ.get(variable) or home / default) / "matplotlib"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return False
        if not os.access(folder, os.W_OK):
            return False
    return True


def title_name(path: str | os.PathLike[str]) -> str:
    """A file's name for a chart's title: bytes that are not UTF-8 (a model copied from a Windows or legacy share,
    decoded by Python as lone surrogates) written as ``\\xff``; matplotlib's font layer refused the name, and the
    whole prediction was lost to an internal TypeError."""
    return os.path.basename(os.fsencode(path)).decode("utf-8", "backslashreplace")
