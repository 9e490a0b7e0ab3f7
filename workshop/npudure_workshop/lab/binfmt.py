"""Let this x86 machine run arm64 binaries: qemu-aarch64 registered with the kernel's binfmt_misc.

Debian's ``qemu-user-static`` ships ``/usr/lib/binfmt.d/qemu-aarch64.conf`` but only systemd (or
binfmt-support's service) registers it, and neither runs where PID 1 is not systemd. So: mount
binfmt_misc if it is not mounted, then write the conf line to ``register``. The conf's ``F`` flag
makes the kernel open the interpreter now, so a chroot or nspawn root needs no copy of qemu.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
CONF_DIRS = (Path("/usr/lib/binfmt.d"), Path("/etc/binfmt.d"))
ENTRY = "qemu-aarch64"
PACKAGE = "qemu-user-static"


class Arm64Unavailable(Exception):
    """This machine cannot run arm64 binaries; the message says why and what would fix it."""


def native_arm64() -> bool:
    return platform.machine() in ("aarch64", "arm64")


def find_conf(dirs: tuple[Path, ...] = CONF_DIRS) -> str | None:
    """The registration line qemu-user-static installed, or None."""
    for d in dirs:
        conf = d / f"{ENTRY}.conf"
        if conf.is_file():
            for line in conf.read_text().splitlines():
                if line.startswith(f":{ENTRY}:"):
                    return line.strip()
    return None


def registered(binfmt_dir: Path = BINFMT_DIR) -> bool:
    entry = binfmt_dir / ENTRY
    try:
        return entry.is_file() and entry.read_text().splitlines()[0].strip() == "enabled"
    except (OSError, IndexError):
        return False


def ensure_arm64(binfmt_dir: Path = BINFMT_DIR) -> str:
    """Make arm64 binaries runnable here (root needed for the first registration); returns how.

    Raises Arm64Unavailable with the reason and the fix when it cannot.
    """
    if native_arm64():
        return "native arm64"
    if registered(binfmt_dir):
        return f"binfmt_misc {ENTRY} (already registered)"
    line = find_conf()
    if line is None:
        raise Arm64Unavailable(
            f"{ENTRY} is not registered and no {ENTRY}.conf was found: install the Debian package "
            f"{PACKAGE} (`apt-get install {PACKAGE}`, or run scripts/bootstrap.sh as root)"
        )
    interpreter = line.split(":")[6] if line.count(":") >= 6 else ""
    if interpreter and not os.path.exists(interpreter):
        raise Arm64Unavailable(f"{interpreter} is missing: reinstall {PACKAGE}")
    if os.geteuid() != 0:
        raise Arm64Unavailable(f"{ENTRY} is not registered with binfmt_misc and only root can register it")
    if not (binfmt_dir / "register").exists():
        mount = shutil.which("mount") or "mount"
        done = subprocess.run(
            [mount, "-t", "binfmt_misc", "binfmt_misc", str(binfmt_dir)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode != 0:
            raise Arm64Unavailable(
                f"cannot mount binfmt_misc on {binfmt_dir}: {done.stderr.strip() or done.returncode} "
                "(a container without that permission cannot run arm64 boards)"
            )
    try:
        (binfmt_dir / "register").write_text(line + "\n")
    except OSError as exc:
        if not registered(binfmt_dir):  # another process may have registered it meanwhile (EEXIST)
            raise Arm64Unavailable(f"cannot register {ENTRY} with binfmt_misc: {exc.strerror}") from None
    if not registered(binfmt_dir):
        raise Arm64Unavailable(f"{ENTRY} was written to {binfmt_dir}/register but is not enabled")
    return f"binfmt_misc {ENTRY} (registered now)"


def can_run_arm64() -> tuple[bool, str]:
    """(True, how) when arm64 binaries run here (registering qemu as root if needed), else (False, why)."""
    try:
        return True, ensure_arm64()
    except Arm64Unavailable as exc:
        return False, str(exc)


__all__ = ["Arm64Unavailable", "can_run_arm64", "ensure_arm64", "find_conf", "native_arm64", "registered"]
