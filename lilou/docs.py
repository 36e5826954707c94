"""Where the documents that messages cite are: ``docs/`` of a source checkout, or the copy an installed wheel carries.

The wheel ships the repository's ``docs/*.md`` as the package ``lilou._docs`` (setup.py maps it to ``docs/``, as it
maps ``checkpoints/``), so a warning that says "see intervals.md" names a file the user has either way.
"""
from __future__ import annotations

from pathlib import Path

from lilou.checkpoints import in_checkout

_PACKAGE = Path(__file__).resolve().parent


def doc(name: str) -> str:
    """How a message names ``docs/<name>``: that path in a checkout, the installed copy's full path otherwise."""
    installed = _PACKAGE / "_docs" / name
    if in_checkout() or not installed.is_file():
        return f"docs/{name}"  # a checkout, or an unpacked sdist run in place: docs/ is beside the package
    return str(installed)
