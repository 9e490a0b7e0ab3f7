#!/usr/bin/env python3
"""What a board runs, as one JSON object: the facts preflight and verify compare across the fleet.

Standard library only, and Python 3.6+ syntax (f-strings at most), so it also runs (and reports
the version) on a board whose Python is too old for the agent. Unknown or unreadable values are "-".

    python3 board_facts.py [--sysfs-root /sys] [--venv /opt/npudure/venv]
"""

import argparse
import glob
import json
import mmap
import os
import platform
import re
import sys

NPU_CORES = {"rk3576": 2, "rk3588": 3, "rk3588s": 3}
LIBRKNNRT = ("/usr/lib/librknnrt.so", "/usr/lib64/librknnrt.so", "/usr/lib/aarch64-linux-gnu/librknnrt.so")
MARK = b"librknnrt version: "


def read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def soc(sysfs):
    paths = [os.path.join(sysfs, "firmware/devicetree/base/compatible")]
    if os.path.realpath(sysfs) == "/sys":
        paths.append("/proc/device-tree/compatible")
    for path in paths:
        try:
            with open(path, "rb") as handle:
                entries = handle.read().decode("ascii", "replace").split("\0")
        except OSError:
            continue
        for entry in entries:
            vendor, _, model = entry.strip().partition(",")
            if vendor == "rockchip" and model in NPU_CORES:
                return model, NPU_CORES[model]
        return (next((e for e in entries if e), "-"), "-")
    return "-", "-"


def npu_driver(sysfs):
    for path in ("/sys/kernel/debug/rknpu/version", os.path.join(sysfs, "module/rknpu/version")):
        text = read(path)
        if text:
            return text.replace("RKNPU driver:", "").strip()
    return "-"


def librknnrt():
    for path in LIBRKNNRT:
        try:
            with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                at = data.find(MARK)
                if at >= 0:
                    tail = data[at + len(MARK) : at + len(MARK) + 120].split(b"\0")[0]
                    return tail.decode("ascii", "replace").strip() or "?"
                return "?"
        except (OSError, ValueError):
            continue
    return "-"


def toolkit_lite2(venv):
    pattern = os.path.join(venv, "lib", "python3*", "site-packages", "rknn_toolkit_lite2-*.dist-info")
    found = sorted(glob.glob(pattern))
    if found:
        return os.path.basename(found[-1])[len("rknn_toolkit_lite2-") : -len(".dist-info")]
    return "-"


def governors(sysfs):
    paths = glob.glob(os.path.join(sysfs, "devices/system/cpu/cpufreq/policy*/scaling_governor"))
    by_policy = {}
    for path in paths:
        by_policy[os.path.basename(os.path.dirname(path))] = read(path) or "?"
    names = sorted(by_policy, key=lambda n: int(re.sub(r"\D", "", n) or 0))
    return " ".join(f"{n}={by_policy[n]}" for n in names) or "-"


def npu_clock(sysfs):
    for folder in sorted(glob.glob(os.path.join(sysfs, "class/devfreq/*.npu"))):
        freq = read(os.path.join(folder, "cur_freq"))
        governor = read(os.path.join(folder, "governor")) or "?"
        if freq and freq.isdigit():
            return f"{int(freq) // 1000000} MHz ({governor})"
    text = read("/sys/kernel/debug/rknpu/freq")
    return f"{text} Hz" if text else "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sysfs-root", default="/sys")
    parser.add_argument("--venv", default="/opt/npudure/venv")
    args = parser.parse_args()
    name, cores = soc(args.sysfs_root)
    facts = {
        "python": "{}.{}.{}".format(*sys.version_info[:3]),
        "python_ok": sys.version_info[:2] >= (3, 10),
        "kernel": platform.release() or "-",
        "soc": name,
        "npu_cores": cores,
        "npu_driver": npu_driver(args.sysfs_root),
        "librknnrt": librknnrt(),
        "rknn_toolkit_lite2": toolkit_lite2(args.venv),
        "cpu_governors": governors(args.sysfs_root),
        "npu_clock": npu_clock(args.sysfs_root),
        # npudure already installed here (else a board joining the fleet: preflight compares what the
        # play installs only across the installed ones).
        "installed": os.path.exists(os.path.join(args.venv, "bin", "npudure")),
    }
    print(json.dumps(facts, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
