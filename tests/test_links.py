"""Every relative link of the repository's Markdown and of the code's comments points somewhere.

Markdown: each `[text](target)` link, image and reference definition of every Markdown file
(README.md, CONTRIBUTING.md, docs/, bench/ and any other file git tracks or would track; the
virtual environments and runs/ left out) names a file that exists, relative to the Markdown file,
and an anchor, if any, that is a heading of the target under GitHub's slug rules. Code: a Markdown
path written in a comment or docstring of the Python files under algos/, common/, envs/, tools/,
bench/, population/ and tests/ (a path from the repository root, with or without an anchor) is
checked the same way. Web links (http, https, mailto) are not followed.
"""

from __future__ import annotations

import re
import subprocess
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote

from conftest import prose_lines

ROOT = Path(__file__).resolve().parent.parent
CODE_DIRS = ("algos", "common", "envs", "tools", "bench", "population", "tests")
SKIP = re.compile(r"(^|/)(\.venv[^/]*|runs|\.git|node_modules)(/|$)")

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
HTML_ID = re.compile(r"<a\s[^>]*?(?:id|name)=[\"']([^\"']+)[\"']", re.I)
# inline links and images: [text](target "title"); the text may hold one level of brackets
INLINE = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
)
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# a Markdown path in code: from the repository root, ending in .md, with an optional anchor
CODE_LINK = re.compile(
    r"(?<![\w./<>{}*-])((?:(?:" + "|".join(CODE_DIRS + ("docs",)) + r")/[\w./-]*?[\w-]+"
    r"|README|CONTRIBUTING)\.md)(#[\w-]+)?(?![\w/{}<>*])"
)

OUTPUT = re.compile(r"(--out|--output|--log)[ =]$")


def markdown_files() -> list[Path]:
    """The Markdown files git tracks or would track (untracked but not ignored), else all."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
        files = [ROOT / p for p in out if p]
    except (OSError, subprocess.CalledProcessError):
        files = list(ROOT.rglob("*.md"))
    return sorted(
        p for p in files if p.is_file() and not SKIP.search(p.relative_to(ROOT).as_posix())
    )


def code_files() -> list[Path]:
    files = [p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py")]
    return sorted(p for p in files if not SKIP.search(p.relative_to(ROOT).as_posix()))


def _outside_fences(text: str):
    """(line number, line) of the lines of a Markdown text outside fenced code blocks."""
    fence = None
    for i, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
        elif fence is not None and m and m.group(1).startswith(fence):
            fence = None
        elif fence is None:
            yield i, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: its rendered text lowercased, every character but
    letters, digits, spaces, '-' and '_' dropped, spaces turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags go
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


@lru_cache(maxsize=None)
def anchors(path: Path) -> frozenset[str]:
    """The anchors a Markdown file offers: its headings' slugs (a repeated one numbered -1, -2, ...
    as GitHub does) and the ids of its HTML anchors."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in _outside_fences(path.read_text(encoding="utf-8")):
        out.update(HTML_ID.findall(line))
        m = HEADING.match(line)
        if not m:
            continue
        s = slug(m.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return frozenset(out)


def problem(base: Path, target: str, here: Path | None = None) -> str | None:
    """Why a relative link from `base` (a directory; `here`, the file, for a bare `#anchor`) to
    `target` is broken, or None."""
    path, _, anchor = target.partition("#")
    dest = (base / unquote(path)).resolve() if path else here
    if dest is None or not dest.exists():
        return "no such file"
    if not anchor or dest.is_dir() or dest.suffix.lower() != ".md":
        return None  # no anchor, or one into a directory or a non-Markdown file: not a heading
    return None if unquote(anchor) in anchors(dest) else "no such heading"


def markdown_links(path: Path):
    """(line number, target) of every relative link of a Markdown file."""
    for i, line in _outside_fences(path.read_text(encoding="utf-8")):
        prose = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
        targets = [m.group(1) for m in INLINE.finditer(prose)]
        m = REFDEF.match(prose)
        targets += [m.group(1)] if m else []
        for t in targets:
            t = t[1:-1] if t.startswith("<") else t
            if t and not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", t):  # http:, https:, mailto:
                yield i, t


def code_links(path: Path):
    """(line number, target) of every Markdown path in a Python file's comments and docstrings."""
    for i, text in prose_lines(path):
        for m in CODE_LINK.finditer(text):
            if not OUTPUT.search(text[: m.start()]):  # a file a command writes need not exist yet
                yield i, m.group(1) + (m.group(2) or "")


def broken_links() -> list[str]:
    found = []
    for md in markdown_files():
        for i, target in markdown_links(md):
            why = problem(md.parent, target, md)
            if why:
                found.append(f"{md.relative_to(ROOT)}:{i}: ({target}): {why}")
    for py in code_files():
        for i, target in sorted(set(code_links(py))):
            why = problem(ROOT, target)
            if why:
                found.append(f"{py.relative_to(ROOT)}:{i}: {target}: {why}")
    return found


def test_slugs_follow_github():
    assert slug("A stable solve") == "a-stable-solve"
    assert slug("The GPU defaults' learning rate") == "the-gpu-defaults-learning-rate"
    assert slug("Defaults: the evidence") == "defaults-the-evidence"
    assert slug("Speed: `--compile`, the host-sync guard") == "speed---compile-the-host-sync-guard"
    assert slug("Round 2 (2026-11-29 07:00 UTC)") == "round-2-2026-11-29-0700-utc"
    assert slug("ppo_vec defaults") == "ppo_vec-defaults"


def test_link_checker_finds_what_is_broken(tmp_path):
    (tmp_path / "a.md").write_text("# Title here\n\n## Title here\n\n```\n# not a heading\n```\n")
    assert anchors(tmp_path / "a.md") == {"title-here", "title-here-1"}
    assert problem(tmp_path, "a.md#title-here-1") is None
    assert problem(tmp_path, "a.md#not-a-heading") == "no such heading"
    assert problem(tmp_path, "b.md") == "no such file"
    (tmp_path / "c.md").write_text(
        "[x](a.md) `[y](gone.md)` ![z](gone.png) [w](https://example.com/gone.md)\n"
        "```\n[v](gone.md)\n```\n[ref]: a.md#title-here\n"
    )
    assert list(markdown_links(tmp_path / "c.md")) == [
        (1, "a.md"),
        (1, "gone.png"),
        (5, "a.md#title-here"),
    ]


def test_every_relative_link_resolves():
    broken = broken_links()
    assert not broken, f"{len(broken)} broken links:\n" + "\n".join(broken)


if __name__ == "__main__":
    print("\n".join(broken_links()) or "no broken links")
