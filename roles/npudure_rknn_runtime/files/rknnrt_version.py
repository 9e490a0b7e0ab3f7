"""Print the version a Rockchip librknnrt.so declares ("librknnrt version: 2.3.2 (...)").

Pure Python so it runs on a bare board (no binutils `strings`). Exit status: 0 printed the version,
3 the file is missing, 4 no version string in it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

VERSION = re.compile(rb"librknnrt version:\s*([0-9]+(?:\.[0-9]+)+[0-9A-Za-z.+-]*)")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: rknnrt_version.py PATH/librknnrt.so", file=sys.stderr)
        return 2
    path = Path(argv[1])
    if not path.is_file():
        print(f"{path}: no such file", file=sys.stderr)
        return 3
    found = VERSION.search(path.read_bytes())
    if not found:
        print(f"{path}: no 'librknnrt version:' string; is this a Rockchip runtime?", file=sys.stderr)
        return 4
    print(found.group(1).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
