"""Host-side plumbing shared by the lab modules: the error type, checked command runs with timeouts,
and the pre-flight checks (root, Debian packages) that say exactly how to fix what is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

# Tool on the controller -> the Debian package that provides it (the fix we print when it is missing).
HOST_TOOLS: dict[str, str] = {
    "systemd-nspawn": "systemd-container",
    "debootstrap": "debootstrap",
    "ip": "iproute2",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "nsenter": "util-linux",
    "setsid": "util-linux",
    "mount": "mount",
}
# The keyring debootstrap checks the Release file against (package debian-archive-keyring).
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")

SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class LabError(RuntimeError):
    """A lab step failed; the message names the step and the fix."""


def which(tool: str) -> str | None:
    # /usr/sbin is often missing from a non-login root PATH; look there too.
    return shutil.which(tool) or shutil.which(tool, path=SBIN_PATH)


def missing_packages(tools: dict[str, str] = HOST_TOOLS, keyring: Path = DEBIAN_KEYRING) -> list[str]:
    """The Debian packages to install before the lab can run (empty when all is there)."""
    missing = {pkg for tool, pkg in tools.items() if which(tool) is None}
    if not keyring.exists():
        missing.add("debian-archive-keyring")
    return sorted(missing)


def install_hint(packages: Sequence[str]) -> str:
    return "apt-get install -y " + " ".join(packages)


def preflight() -> None:
    """Refuse early, with the fix, when not root or when host packages are missing."""
    if os.geteuid() != 0:
        raise LabError(
            "the lab needs root (it mounts overlays, creates network namespaces and cgroups): "
            "run it with sudo"
        )
    missing = missing_packages()
    if missing:
        raise LabError(
            f"missing Debian packages on this machine: {', '.join(missing)}; fix: {install_hint(missing)}"
        )


def run(
    cmd: Sequence[str],
    step: str,
    *,
    timeout: float = 30,
    check: bool = True,
    input: str | None = None,
    log: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a host command with a bound; on failure raise LabError naming the step and the output."""
    env = {**os.environ, "PATH": SBIN_PATH + ":" + os.environ.get("PATH", "")}
    try:
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a") as fh:
                fh.write(f"+ {' '.join(cmd)}\n")
                fh.flush()
                proc = subprocess.run(
                    list(cmd),
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=timeout,
                    env=env,
                    input=input,
                    stdin=None if input is not None else subprocess.DEVNULL,
                )
        else:
            proc = subprocess.run(
                list(cmd),
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                input=input,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
    except FileNotFoundError as exc:
        raise LabError(
            f"{step}: {cmd[0]} not found; fix: {install_hint(missing_packages() or ['?'])}"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        where = f"; see {log}" if log else ""
        raise LabError(f"{step}: `{' '.join(cmd)}` did not finish within {timeout:.0f} s{where}") from exc
    if check and proc.returncode != 0:
        detail = f"see {log}" if log else (proc.stderr or proc.stdout or "").strip()[-800:]
        raise LabError(f"{step} failed (exit {proc.returncode}): {detail}")
    return proc


def ssh_keygen(key: Path, comment: str, step: str) -> None:
    """A new ed25519 key without a passphrase at ``key`` (and ``key``.pub), commented ``comment``."""
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)], step)


def is_mountpoint(path: Path) -> bool:
    """True when `path` is a mount point, read from /proc/self/mountinfo (works for file binds too)."""
    target = str(path.resolve()) if path.exists() else str(path)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) > 4 and _unescape(fields[4]) == target:
            return True
    return False


def mounts_under(prefix: Path) -> list[str]:
    """Mount points at or below `prefix`, deepest first (the order to unmount them)."""
    root = str(prefix.resolve()) if prefix.exists() else str(prefix)
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) > 4:
            point = _unescape(fields[4])
            if point == root or point.startswith(root.rstrip("/") + "/"):
                found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"), reverse=True)


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
