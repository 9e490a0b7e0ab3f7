"""CPU clock caps through cpufreq's ``scaling_max_freq``: the heterogeneity dial on real boards.

Every write is read back. ``scaling_max_freq`` shows the *effective* limit (the lowest of every
request, thermal throttling included), so a cap that does not read back as written is reported
rather than assumed. Values in sysfs are kHz; this module speaks MHz.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from npudure.affinity.cores import format_cpu_list, parse_cpu_list
from npudure.board.sysfs import numbered_children

log = logging.getLogger(__name__)

# {policy name: previous value}, what set_* return and restore* take back.
Previous = dict[str, int]


class CpuFreqError(Exception):
    """A cap or governor could not be read, set or confirmed; the message says which file and why."""


@dataclass(frozen=True)
class Policy:
    """One cpufreq policy (a cluster sharing one clock): ``policy4`` for cpus 4-7."""

    name: str
    path: Path
    cpus: tuple[int, ...]

    def describe(self) -> str:
        return f"{self.name} (cpus {format_cpu_list(self.cpus) or '?'})"


def _cpu_root(sysfs_root: str | os.PathLike[str]) -> Path:
    return Path(sysfs_root) / "devices" / "system" / "cpu"


def available_policies(sysfs_root: str | os.PathLike[str] = "/sys") -> list[Policy]:
    """cpufreq policies in sysfs; per-CPU ``cpuN/cpufreq`` folders when there are no ``policyN``."""
    root = _cpu_root(sysfs_root)
    policies = []
    for _, path in numbered_children(root / "cpufreq", "policy"):
        try:
            cpus = parse_cpu_list((path / "related_cpus").read_text())
        except (OSError, ValueError):
            cpus = ()
        policies.append(Policy(path.name, path, cpus))
    if policies:
        return policies
    return [
        Policy(cpu.name, cpu / "cpufreq", (number,))
        for number, cpu in numbered_children(root, "cpu")
        if (cpu / "cpufreq").is_dir()
    ]


def _no_cpufreq(sysfs_root: str | os.PathLike[str]) -> CpuFreqError:
    return CpuFreqError(
        f"this machine exposes no cpufreq (nothing under {_cpu_root(sysfs_root)}/cpufreq/policy*), "
        "so its CPU clock cannot be capped; on emulated boards use the sim backend's cap (sim.cpu_cap_mhz)"
    )


def select_policies(
    sysfs_root: str | os.PathLike[str] = "/sys",
    cpus: Iterable[int] | None = None,
    policy: Policy | str | None = None,
) -> list[Policy]:
    """The policies to act on: one by name, those covering ``cpus``, or all of them."""
    policies = available_policies(sysfs_root)
    if not policies:
        raise _no_cpufreq(sysfs_root)
    known = ", ".join(p.describe() for p in policies)
    if policy is not None:
        name = policy.name if isinstance(policy, Policy) else policy
        chosen = [p for p in policies if p.name == name]
        if not chosen:
            raise CpuFreqError(f"no cpufreq policy named {name!r}; this machine has {known}")
        return chosen
    if cpus is not None:
        wanted = set(cpus)
        chosen = [p for p in policies if wanted & set(p.cpus)]
        if not chosen:
            raise CpuFreqError(
                f"no cpufreq policy covers cpus {format_cpu_list(wanted)}; this machine has {known}"
            )
        return chosen
    return policies


def _read_int(path: Path) -> int:
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise CpuFreqError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return int(text)
    except ValueError:
        raise CpuFreqError(f"{path} holds {text!r}, not a number in kHz") from None


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            hint = "run as root (the agent's unit must run as root to cap the clock)"
        elif exc.errno == errno.EINVAL:
            hint = "the kernel rejected the value"
        else:
            hint = "check that cpufreq is enabled for this CPU"
        raise CpuFreqError(f"cannot write {value!r} to {path}: {exc.strerror}; {hint}") from None


def read_max_freq_khz(policy: Policy) -> int:
    return _read_int(policy.path / "scaling_max_freq")


def read_max_freq_mhz(policy: Policy) -> int:
    return round(read_max_freq_khz(policy) / 1000)


def available_frequencies_mhz(policy: Policy) -> list[int] | None:
    """The clocks the driver offers, or None when it does not list them."""
    try:
        text = (policy.path / "scaling_available_frequencies").read_text()
        return sorted({round(int(v) / 1000) for v in text.split()})
    except (OSError, ValueError):
        return None


def _check_request(policy: Policy, khz: int) -> None:
    # Refuse up front what the kernel would silently round or clamp: the read-back would fail anyway,
    # but this message can say what would have worked.
    offered = available_frequencies_mhz(policy)
    if offered and round(khz / 1000) not in offered:
        raise CpuFreqError(
            f"{policy.describe()} cannot run at {khz // 1000} MHz; choose one of {offered} MHz "
            f"(from {policy.path / 'scaling_available_frequencies'})"
        )
    try:
        lo = _read_int(policy.path / "cpuinfo_min_freq")
        hi = _read_int(policy.path / "cpuinfo_max_freq")
    except CpuFreqError:
        return
    if not lo <= khz <= hi:
        raise CpuFreqError(
            f"{policy.describe()} runs between {lo // 1000} and {hi // 1000} MHz; "
            f"{khz // 1000} MHz is outside"
        )


def _set_all(policies: list[Policy], filename: str, value: str, what: str) -> dict[str, str]:
    """Write ``value`` to each policy's file and read it back; on any failure put back what was written."""
    previous: dict[str, str] = {}
    try:
        for policy in policies:
            path = policy.path / filename
            old = _read_text(path)
            _write(path, value)
            previous[policy.name] = old
            now = _read_text(path)
            if now != value:
                raise CpuFreqError(
                    f"wrote {what} {value!r} to {path} but it reads back {now!r}: the kernel holds it "
                    "elsewhere (thermal throttling, another tool's limit, or a value the driver rounds); "
                    "nothing was changed"
                )
    except CpuFreqError:
        for name, old in previous.items():
            try:
                _write(next(p for p in policies if p.name == name).path / filename, old)
            except CpuFreqError as exc:
                log.warning("could not put back %s: %s", name, exc)
        raise
    return previous


def _read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise CpuFreqError(f"cannot read {path}: {exc.strerror}") from None


def set_max_freq(
    mhz: int,
    cpus: Iterable[int] | None = None,
    sysfs_root: str | os.PathLike[str] = "/sys",
    policy: Policy | str | None = None,
) -> Previous:
    """Cap the clock of the policies covering ``cpus`` (or ``policy``, or all) at ``mhz``.

    Returns ``{policy name: previous scaling_max_freq in kHz}`` for :func:`restore`. All or nothing:
    a failure puts back the policies already written before raising CpuFreqError.
    """
    if mhz <= 0:
        raise CpuFreqError(
            f"a CPU cap must be a positive number of MHz, not {mhz}; use remove_cap() to lift it"
        )
    khz = int(mhz) * 1000
    policies = select_policies(sysfs_root, cpus, policy)
    for p in policies:
        read_max_freq_khz(p)  # a garbled current value could not be restored: refuse before writing
        _check_request(p, khz)
    previous = _set_all(policies, "scaling_max_freq", str(khz), "cap")
    return {name: int(old) for name, old in previous.items()}


@dataclass(frozen=True)
class CapResult:
    """What :func:`cap_clusters` did: the previous caps (for :func:`restore`) and each policy's clock."""

    previous: Previous
    applied_mhz: dict[str, int]
    # One line per cluster that could not take the requested clock and runs at its own maximum.
    clamped: tuple[str, ...]

    def describe(self) -> str:
        return "; ".join(self.clamped)


def _hardware_max_mhz(policy: Policy) -> int | None:
    """The policy's top clock: the largest offered frequency, else ``cpuinfo_max_freq``; None if unknown."""
    offered = available_frequencies_mhz(policy)
    if offered:
        return offered[-1]
    try:
        return round(_read_int(policy.path / "cpuinfo_max_freq") / 1000)
    except CpuFreqError:
        return None


def cap_clusters(
    mhz: int, cpus: Iterable[int] | None = None, sysfs_root: str | os.PathLike[str] = "/sys"
) -> CapResult:
    """Cap every cluster that can run at ``mhz``; a cluster whose maximum is lower runs at that maximum.

    The reference ladder (2208 ... 600 MHz) asks for clocks only the big cluster reaches: the little
    cluster (1800 MHz on RK3576/RK3588) is then clamped to its own top clock rather than refused, and
    the result says so. Refused (CpuFreqError, nothing changed) when no cluster can take ``mhz`` or a
    cluster that can reach it does not offer it. All or nothing, like :func:`set_max_freq`.
    """
    if mhz <= 0:
        raise CpuFreqError(
            f"a CPU cap must be a positive number of MHz, not {mhz}; use remove_cap() to lift it"
        )
    policies = select_policies(sysfs_root, cpus)
    targets: dict[str, int] = {}
    clamped: list[str] = []
    for p in policies:
        read_max_freq_khz(p)  # a garbled current value could not be restored: refuse before writing
        top = _hardware_max_mhz(p)
        if top is not None and mhz > top:
            targets[p.name] = top
            clamped.append(f"{p.describe()} tops out at {top} MHz: runs at {top} MHz, not {mhz}")
        else:
            _check_request(p, mhz * 1000)
            targets[p.name] = mhz
    if len(clamped) == len(policies):
        tops = ", ".join(f"{p.describe()} {targets[p.name]} MHz" for p in policies)
        raise CpuFreqError(f"no CPU cluster here can run at {mhz} MHz (their maxima: {tops})")
    previous: Previous = {}
    try:
        for p in policies:
            previous.update(set_max_freq(targets[p.name], sysfs_root=sysfs_root, policy=p))
    except CpuFreqError:
        restore(previous, sysfs_root)
        raise
    for line in clamped:
        log.info("CPU cap %d MHz: %s", mhz, line)
    return CapResult(previous, targets, tuple(clamped))


def remove_cap(
    cpus: Iterable[int] | None = None,
    sysfs_root: str | os.PathLike[str] = "/sys",
    policy: Policy | str | None = None,
) -> Previous:
    """Lift the cap to each policy's hardware maximum (``cpuinfo_max_freq``); returns the previous caps.

    Not read back strictly: a hot board may be thermally throttled right now, and the lifted request
    still takes effect once it cools (a warning is logged).
    """
    policies = select_policies(sysfs_root, cpus, policy)
    previous = {p.name: read_max_freq_khz(p) for p in policies}
    _restore(
        {p.name: _read_int(p.path / "cpuinfo_max_freq") for p in policies}, "scaling_max_freq", sysfs_root
    )
    return previous


def _restore(
    previous: dict[str, int] | dict[str, str], filename: str, sysfs_root: str | os.PathLike[str]
) -> None:
    by_name = {p.name: p for p in available_policies(sysfs_root)}
    problems = []
    for name, old in previous.items():
        policy = by_name.get(name)
        if policy is None:
            problems.append(f"{name}: no longer in sysfs")
            continue
        path = policy.path / filename
        try:
            _write(path, str(old))
            now = _read_text(path)
        except CpuFreqError as exc:
            problems.append(str(exc))
            continue
        if now != str(old):
            # The request is stored even when a lower limit (e.g. thermal) is in force right now.
            log.warning("restored %s to %s, but it reads %s (a lower limit is active)", path, old, now)
    if problems:
        raise CpuFreqError("could not restore: " + "; ".join(problems))


def restore(previous: Previous, sysfs_root: str | os.PathLike[str] = "/sys") -> None:
    """Put back the caps :func:`set_max_freq` returned."""
    _restore(previous, "scaling_max_freq", sysfs_root)


@contextmanager
def capped(
    mhz: int,
    cpus: Iterable[int] | None = None,
    sysfs_root: str | os.PathLike[str] = "/sys",
    policy: Policy | str | None = None,
) -> Iterator[Previous]:
    """``with capped(1008, cpus=[4, 5, 6, 7]):`` ... the previous caps come back on any exit."""
    previous = set_max_freq(mhz, cpus, sysfs_root, policy)
    try:
        yield previous
    finally:
        restore(previous, sysfs_root)


def set_governor(
    governor: str,
    cpus: Iterable[int] | None = None,
    sysfs_root: str | os.PathLike[str] = "/sys",
    policy: Policy | str | None = None,
) -> dict[str, str]:
    """Switch the governor (e.g. ``performance``); returns the previous ones for :func:`restore_governors`."""
    policies = select_policies(sysfs_root, cpus, policy)
    for p in policies:
        try:
            offered = (p.path / "scaling_available_governors").read_text().split()
        except OSError:
            continue
        if governor not in offered:
            raise CpuFreqError(f"{p.describe()} has no governor {governor!r}; choose one of {offered}")
    return _set_all(policies, "scaling_governor", governor, "governor")


def restore_governors(previous: dict[str, str], sysfs_root: str | os.PathLike[str] = "/sys") -> None:
    _restore(previous, "scaling_governor", sysfs_root)
