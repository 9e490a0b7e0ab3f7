"""Every relative link in the Markdown documentation resolves (issue #48: the README links into docs/,
docs/results/ and docs/adr/, and those pages link back): the file exists, and a ``#fragment`` names a
heading of the page it points at (GitHub's anchors: lower case, punctuation dropped, spaces to hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP = ("README.md", "CHANGELOG.md", "benchmarks/README.md", "systemd/README.md")
PAGES = sorted([*(ROOT / name for name in TOP), *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)


def anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        slug = anchor(heading)
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


def broken(page: Path) -> list[str]:
    problems = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            problems.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{target}: no heading #{fragment} in {dest.name}")
    return problems


def test_the_pages_are_found() -> None:
    assert ROOT / "README.md" in PAGES and ROOT / "docs" / "results" / "README.md" in PAGES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken(page) == [], f"{page.relative_to(ROOT)}: broken links"


def test_a_broken_link_and_a_missing_heading_are_caught(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    page.write_text("# A `b` (c)\n[ok](#a-b-c) [gone](missing.md) [no](#nope)\n```\n[fenced](x.md)\n```\n")
    assert broken(page) == ["missing.md: no such file", "#nope: no heading #nope in a.md"]
