"""Regenerate the Python stubs from inference.proto (``python -m npudure.proto.generate``).

The output depends only on the .proto and the pinned grpcio-tools version, so a test can regenerate
into a temporary folder and compare byte for byte with the committed stubs.
"""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
PROTO = "npudure/proto/inference.proto"
STUBS = ("inference_pb2.py", "inference_pb2_grpc.py", "inference_pb2.pyi")


def generate(out_root: Path = PACKAGE_ROOT) -> list[Path]:
    """Run protoc over the .proto; return the generated files under ``out_root``."""
    try:
        from grpc_tools import protoc
    except ImportError as exc:  # grpcio-tools is a dev dependency
        raise SystemExit("grpcio-tools is missing: pip install -e '.[dev]'") from exc
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    out_root.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PACKAGE_ROOT}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        PROTO,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")
    return [out_root / "npudure" / "proto" / name for name in STUBS]


if __name__ == "__main__":
    for path in generate():
        print(path.relative_to(PACKAGE_ROOT))
    sys.exit(0)
