"""The cached Debian base image every board's overlay root sits on.

Built once with ``debootstrap --variant=minbase`` (1.5–3 min) into a ``.partial`` folder, finished
(machine-id symlink, host keys removed), then renamed into place with a marker file: a half-built
image never has the marker and is never reused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from npudure_workshop.lab.host import DEBIAN_KEYRING, LabError, run

SUITE = "bookworm"
# Bump when the image's content or finishing steps change: older caches are then rebuilt.
IMAGE_FORMAT = 1
# What a board needs: systemd as PID 1, sshd for Ansible, python3 (+venv for the agent's virtualenv),
# ip/ps for tests and fault injection, sudo because roles may say `become: true`.
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-venv",
    "iproute2",
    "procps",
    "sudo",
    "iputils-ping",
)
MARKER = ".npudure-lab-image.json"
DEFAULT_CACHE = Path("/var/cache/npudure/lab-image-bookworm")
BUILD_TIMEOUT_S = 1200
# Debian architecture of the board images. A foreign one (arm64 on x86) runs under qemu-user through
# binfmt_misc (npudure_workshop/lab/binfmt.py); its debootstrap is CPU-bound under qemu: ~3 min, once.
NATIVE_ARCH = "native"
ARCHES = (NATIVE_ARCH, "arm64")


def cache_dir(arch: str = NATIVE_ARCH) -> Path:
    """The native image's folder, or for a foreign ``arch`` the same name + ``-<arch>`` beside it."""
    base = Path(os.environ.get("NPUDURE_LAB_CACHE") or DEFAULT_CACHE)
    return base if arch == NATIVE_ARCH else base.with_name(f"{base.name}-{arch}")


@dataclass(frozen=True)
class AptSource:
    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]


def parse_apt_sources(text: str, deb822: bool) -> list[AptSource]:
    """The `deb` entries of one sources file, in either one-line or deb822 (``.sources``) format."""
    out: list[AptSource] = []
    if deb822:
        for stanza in re.split(r"\n\s*\n", text):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
                continue
            for uri in fields.get("uris", "").split():
                out.append(
                    AptSource(
                        uri,
                        tuple(fields.get("suites", "").split()),
                        tuple(fields.get("components", "").split()),
                    )
                )
        return out
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("deb "):
            continue
        words = re.sub(r"\[[^\]]*\]", " ", line).split()[1:]  # drop "[arch=... signed-by=...]"
        if len(words) >= 2:
            out.append(AptSource(words[0], (words[1],), tuple(words[2:])))
    return out


def find_mirror(etc_apt: Path = Path("/etc/apt"), suite: str = SUITE) -> str:
    """The Debian mirror this machine already uses for `suite` main (never a host hard-coded here)."""
    files: list[tuple[Path, bool]] = []
    if (etc_apt / "sources.list").exists():
        files.append((etc_apt / "sources.list", False))
    d = etc_apt / "sources.list.d"
    if d.is_dir():
        for f in sorted(d.iterdir()):
            if f.suffix == ".list":
                files.append((f, False))
            elif f.suffix == ".sources":
                files.append((f, True))
    for path, deb822 in files:
        for src in parse_apt_sources(path.read_text(errors="replace"), deb822):
            if suite in src.suites and "main" in src.components and src.uri.startswith(("http", "file")):
                return src.uri.rstrip("/")
    raise LabError(
        f"no apt source for Debian {suite} main found in {etc_apt}/sources.list*; add one "
        f"(e.g. the mirror you install packages from) or set NPUDURE_LAB_MIRROR=<url>"
    )


def read_marker(image: Path) -> dict | None:
    try:
        return json.loads((image / MARKER).read_text())
    except (OSError, ValueError):
        return None


def image_ok(image: Path, arch: str = NATIVE_ARCH) -> bool:
    marker = read_marker(image)
    return (
        marker is not None
        and marker.get("format") == IMAGE_FORMAT
        and marker.get("packages") == list(PACKAGES)
        and marker.get("arch", NATIVE_ARCH) == arch
    )


def debootstrap_cmd(
    target: Path, mirror: str, keyring: Path = DEBIAN_KEYRING, arch: str = NATIVE_ARCH
) -> list[str]:
    return [
        "debootstrap",
        "--variant=minbase",
        *([f"--arch={arch}"] if arch != NATIVE_ARCH else []),
        f"--include={','.join(PACKAGES)}",
        f"--keyring={keyring}",
        SUITE,
        str(target),
        mirror,
    ]


def finish_image(root: Path) -> None:
    """Make the image safe to share between boards: no identity of its own."""
    # debootstrap leaves /var/lib/dbus/machine-id as a file: every board would boot with that id.
    dbus_id = root / "var/lib/dbus/machine-id"
    dbus_id.parent.mkdir(parents=True, exist_ok=True)
    if dbus_id.exists() or dbus_id.is_symlink():
        dbus_id.unlink()
    dbus_id.symlink_to("/etc/machine-id")
    (root / "etc/machine-id").write_text("")  # each board writes its own into its upper layer
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()  # each board gets its own host keys
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    conf = root / "etc/ssh/sshd_config.d/npudure-lab.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(
        "# npudure lab: key-only root login, no reverse DNS (boards have no resolver)\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n"
    )
    # Nothing in a board's console waits for a login prompt.
    for unit in ("console-getty.service", "getty@.service"):
        mask = root / "etc/systemd/system" / unit
        mask.parent.mkdir(parents=True, exist_ok=True)
        if not mask.exists() and not mask.is_symlink():
            mask.symlink_to("/dev/null")


def ensure_image(image: Path | None = None, *, log=print, arch: str = NATIVE_ARCH) -> Path:
    """Return the cached image, building it first when there is no complete one."""
    if arch not in ARCHES:
        raise LabError(f"unknown board architecture {arch!r}; use one of: {', '.join(ARCHES)}")
    image = image or cache_dir(arch)
    if arch != NATIVE_ARCH:
        from npudure_workshop.lab.binfmt import Arm64Unavailable, ensure_arm64

        try:
            # debootstrap's second stage and every board booted from the image run arm64 binaries; the
            # registration does not survive a reboot of this machine, the cached image does.
            ensure_arm64()
        except Arm64Unavailable as exc:
            raise LabError(f"cannot run {arch} boards: {exc}") from None
    if image_ok(image, arch):
        return image
    mirror = os.environ.get("NPUDURE_LAB_MIRROR") or find_mirror()
    partial = image.with_name(image.name + ".partial")
    build_log = image.with_name(image.name + ".log")
    image.parent.mkdir(parents=True, exist_ok=True)
    for stale in (partial, image):
        if stale.exists():
            shutil.rmtree(stale)
    build_log.write_text("")
    what = "base image" if arch == NATIVE_ARCH else f"{arch} base image (under qemu-user)"
    log(f"building the {what} (Debian {SUITE} from {mirror}, 1.5–3 min, once) into {image}; log: {build_log}")
    started = time.monotonic()
    run(
        debootstrap_cmd(partial, mirror, arch=arch),
        "debootstrap (building the lab base image)",
        timeout=BUILD_TIMEOUT_S,
        log=build_log,
    )
    finish_image(partial)
    (partial / MARKER).write_text(
        json.dumps(
            {
                "format": IMAGE_FORMAT,
                "suite": SUITE,
                "arch": arch,
                "packages": list(PACKAGES),
                "mirror": mirror,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
            indent=2,
        )
        + "\n"
    )
    partial.rename(image)
    log(f"base image ready in {time.monotonic() - started:.0f} s")
    return image
