"""NPUDure: one inference cluster from a shelf of Rockchip NPU boards."""

__version__ = "0.1.0"

from typing import Any

__all__ = ["__version__", "connect"]


def __getattr__(name: str) -> Any:  # lazy: `import npudure` stays light (no grpc) for the CLI and Ansible
    if name == "connect":
        from npudure.client.proxyless import connect

        return connect
    raise AttributeError(f"module 'npudure' has no attribute {name!r}")
