"""The code blocks of the documentation that the suite runs as written. A block is marked by an HTML comment on
the line before its fence, `<!-- runnable: NAME -->` (invisible on the site; docs/index.md says so), in README.md
or a page under docs/; `example(NAME)` is its text, unindented (a block inside a Material tab is indented)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKED = re.compile(r"^([ \t]*)<!-- runnable: ([\w-]+) -->\n\1```[\w-]*\n(.*?)\n\1```[ \t]*$", re.M | re.S)


def pages() -> list[Path]:
    """Every page a marked block may be on."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def marked() -> dict[str, str]:
    """Every marked block by its name (a name used twice is an error)."""
    found: dict[str, str] = {}
    for page in pages():
        for indent, name, body in MARKED.findall(page.read_text()):
            assert name not in found, f"two blocks are marked runnable: {name} (the second in {page})"
            found[name] = "\n".join(line.removeprefix(indent) for line in body.split("\n")) + "\n"
    return found


def example(name: str) -> str:
    """The block marked `<!-- runnable: NAME -->`, as written."""
    blocks = marked()
    assert name in blocks, f"no block is marked <!-- runnable: {name} --> in README.md or docs/"
    return blocks[name]
