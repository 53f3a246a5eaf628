"""Width and form by one formatter: every Python file of the repository is laid out as `ruff format`
lays it out with the repository's `ruff.toml` (100 columns), no line is wider than that (prose
too: the formatter does not wrap comments and docstrings), and `# fmt: off` appears only around
the tables of per-task defaults (`*_DEFAULTS`), which read best aligned as rows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 100


def python_files() -> list[Path]:
    """The repository's own Python files (not virtual environments, caches or run outputs)."""
    return sorted(
        p
        for p in ROOT.rglob("*.py")
        if not any(
            part.startswith(".") or part in ("__pycache__", "runs")
            for part in p.relative_to(ROOT).parts
        )
    )


def test_ruff_format_leaves_every_file_as_it_is():
    files = [str(p.relative_to(ROOT)) for p in python_files()]
    r = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, f"not formatted (run `ruff format` on them):\n{r.stdout}{r.stderr}"


def test_no_line_is_wider_than_the_formatter_width():
    wide = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in python_files()
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if len(line) > WIDTH
    ]
    assert not wide, f"lines over {WIDTH} characters (rewrap the prose): {wide[:20]}"


def test_fmt_off_only_around_defaults_tables():
    misuse = []
    for p in python_files():
        lines = p.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() != "# fmt: off":
                continue
            body = [line for line in lines[i + 1 :] if not line.lstrip().startswith("#")]
            if not body or not re.match(r"[A-Z_]*DEFAULTS\b", body[0]):
                misuse.append(f"{p.relative_to(ROOT)}:{i + 1}")
            end = next(
                (j for j in range(i + 1, len(lines)) if lines[j].strip() == "# fmt: on"), None
            )
            if end is None:
                misuse.append(f"{p.relative_to(ROOT)}:{i + 1} (no `# fmt: on`)")
                continue
            names = [
                m.group(1)
                for m in (re.match(r"([A-Za-z_]\w*)\b.*=", line) for line in lines[i + 1 : end])
                if m
            ]
            if any(not n.endswith("DEFAULTS") for n in names):
                misuse.append(f"{p.relative_to(ROOT)}:{i + 1} (assigns {names})")
    assert not misuse, f"`# fmt: off` around something other than a *_DEFAULTS table: {misuse}"
