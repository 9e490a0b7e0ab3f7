"""Optional dependencies by machine: an import that names the extra to install when it is missing.

The boards install ``npudure`` (plus their backend's extra) and nothing for the controller: the workshop
(npudure-workshop) and with it the bench plots (matplotlib) and the rich terminal tables and bars (rich)
come with ``npudure[controller]``. A missing workshop is npudure.cli's one line (MissingWorkshop).
Runs on the boards: Python 3.10.
"""

from __future__ import annotations

import importlib
from types import ModuleType

CONTROLLER = "controller"


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message says which extra brings it."""


def require(module: str, what: str, extra: str = CONTROLLER) -> ModuleType:
    """Import MODULE for WHAT, or raise :class:`MissingExtra` with the one line that fixes it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = module.partition(".")[0]
        raise MissingExtra(
            f"{what} needs {package}, which comes with the '{extra}' extra: pip install 'npudure[{extra}]'"
        ) from exc
