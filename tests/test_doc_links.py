"""Every relative link of the docs and the README reaches a file, and its ``#anchor`` a heading
of that file (GitHub's slugs), so that moving a section (docs/history/) cannot strand a link."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.*)$", flags=re.M)


def prose(path: Path) -> str:
    """The file without its fenced code blocks (a ``# comment`` there is no heading)."""
    return re.sub(r"```.*?```", "", path.read_text(), flags=re.S)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of ``path``'s headings (a repeated one gets ``-1``, ``-2``, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(prose(path)):
        s = slug(heading)
        out.add(f"{s}-{seen[s]}" if s in seen else s)
        seen[s] = seen.get(s, 0) + 1
    return out


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    """The links of ``path`` that reach no file or no heading, named from ``root``."""
    bad = []
    for target in LINK.findall(prose(path)):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(f"{path.relative_to(root)}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{path.relative_to(root)}: {target}: no such heading")
    return bad


def test_every_link_of_the_docs_resolves() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    assert len(pages) > 10
    bad = [b for page in pages for b in broken_links(page)]
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n\n## The game's rules (issue 3)\n\n## Top\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#the-games-rules-issue-3) [ok](a.md#top-1) [bad](a.md#rules)\n")
    assert anchors(tmp_path / "a.md") == {"top", "the-games-rules-issue-3", "top-1"}
    assert broken_links(page, tmp_path) == ["b.md: a.md#rules: no such heading"]
    page.write_text("[gone](c.md)\n")
    assert broken_links(page, tmp_path) == ["b.md: c.md: no such file"]
