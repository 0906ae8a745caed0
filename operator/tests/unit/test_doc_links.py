"""Every relative link of the README and docs/ reaches a file, and its #anchor a heading there.

The README's text moved into docs/ (issue #28) and bench/results into bench/notes: a link left
behind by such a move fails here instead of on a reader.
"""

from __future__ import annotations

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[3]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def documents() -> list[pathlib.Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "charts/switchyard/README.md",
            REPO / "dashboards/README.md"]


def without_fences(text: str) -> str:
    return re.sub(r"^ *```.*?^ *```", "", text, flags=re.S | re.M)


def prose(text: str) -> str:
    """The text without fenced blocks and inline code, where brackets are not links."""
    return re.sub(r"(`+).*?\1", "", without_fences(text))


def anchors(path: pathlib.Path) -> set[str]:
    """GitHub's anchors for the headings of a page: lower case, punctuation dropped, blanks to '-'."""
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#{1,6} (.*)$", without_fences(path.read_text()), re.M)}


def test_every_relative_link_reaches_its_file_and_heading():
    broken = []
    for doc in documents():
        for link in LINK.findall(prose(doc.read_text())):
            if re.match(r"^[a-z][a-z+.-]*:", link):
                continue  # https:, mailto:
            path, _, anchor = link.partition("#")
            target = (doc.parent / path).resolve() if path else doc
            if not target.exists():
                broken.append(f"{doc.relative_to(REPO)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                broken.append(f"{doc.relative_to(REPO)}: {link} (no such heading)")
    assert not broken, broken


def test_the_check_finds_a_heading_and_misses_a_wrong_one():
    guide = REPO / "docs/admin-guide.md"
    assert {"s3-staging", "several-replicas-one-leader", "security-who-decides-what"} <= anchors(guide)
    assert "no-such-heading" not in anchors(guide)
    assert LINK.findall(prose("see [a](b.md#c) and `[x](y)`")) == ["b.md#c"]
