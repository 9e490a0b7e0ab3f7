"""The roles' Python helpers (roles/*/files/*.py) as modules: they are copied to hosts and run as
scripts, so they are not importable from the package and the tests load them by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_role_script(role: str, name: str, module_name: str | None = None) -> ModuleType:
    """``roles/ROLE/files/NAME.py`` loaded as a fresh module (``module_name`` defaults to NAME)."""
    path = ROOT / "roles" / role / "files" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(module_name or name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module
