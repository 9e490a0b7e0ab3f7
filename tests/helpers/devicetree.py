"""A fake device tree for SoC detection: the `compatible` strings of real boards' firmware."""

from __future__ import annotations

from pathlib import Path

COMPATIBLE = {
    "rk3588": b"radxa,rock-5b\0rockchip,rk3588\0",
    "rk3576": b"armsom,sige5\0rockchip,rk3576\0",
    "rk3566": b"pine64,quartz64-a\0rockchip,rk3566\0",
}


def fake_sysfs(root: Path, compatible: bytes | None) -> Path:
    """A sysfs root whose device tree says ``compatible`` (None: no such file)."""
    base = root / "firmware/devicetree/base"
    base.mkdir(parents=True)
    if compatible is not None:
        (base / "compatible").write_bytes(compatible)
    return root
