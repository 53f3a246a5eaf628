"""What the micro-benchmarks in bench/micro/ share: a rate measured after a warm-up, repeated runs
taking turns, the machine line of a table, the command line and the tail that keeps a script's
Markdown table in bench/results/ (the path its committed table has, so that a rerun replaces it).

A script here measures one thing and prints its table. It puts the repository and bench/ on
sys.path (it runs as `python bench/micro/NAME.py`, from anywhere), builds its parser with
`parser(__doc__)` (`--help` is its docstring; a wrong flag is one line, exit status 2) and ends
with `script(main, "TABLE")`, `main()` returning the table.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def parser(doc: str) -> argparse.ArgumentParser:
    """A script's parser: `doc` (its module docstring) as `--help`, a parse error one line."""
    from common.cli import ArgumentParser

    return ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def rate(
    step: Callable[[], object],
    seconds: float,
    warmup: int = 3,
    chunk: int = 10,
    sync: Callable[[], None] | None = None,
    min_calls: int = 1,
) -> float:
    """Calls of `step()` a second: `warmup` calls left out, then `chunk` calls at a time, each
    chunk followed by `sync()` (so that a GPU's queued work is in the time), until `seconds` of
    wall time and at least `min_calls` calls have passed."""
    sync = sync or (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    calls, start = 0, time.perf_counter()
    while True:
        for _ in range(chunk):
            step()
        calls += chunk
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and calls >= min_calls:
            return calls / elapsed


def synchronizer(device) -> Callable[[], None] | None:
    """What waits for `device`'s queued work: CUDA's `synchronize`, nothing on a CPU."""
    import torch

    return torch.cuda.synchronize if torch.device(device).type == "cuda" else None


def alternating(repeats: int, **sides: Callable[[], object]) -> dict[str, list]:
    """Each side's results over `repeats` rounds, the sides taking turns in each round, so that a
    drift of the machine's speed during the measurement falls on all of them alike."""
    got: dict[str, list] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, measure in sides.items():
            got[name].append(measure())
    return got


def machine() -> str:
    """The CPU's model name and the torch version, for a table's heading."""
    import torch

    cpu = Path("/proc/cpuinfo")
    names = cpu.read_text().splitlines() if cpu.exists() else []
    name = next((n.split(":", 1)[1].strip() for n in names if n.startswith("model name")), None)
    return f"{name or platform.processor() or platform.machine()}, torch {torch.__version__}"


def write(path: str | Path, text: str) -> None:
    """`text` as the file `path`, atomically: a measurement stopped part-way keeps the last one."""
    from common.checkpoint import atomic_write

    atomic_write(path, text.rstrip("\n") + "\n")


def script(main: Callable[[], str | None], table: str | None = None) -> None:
    """The tail of a script: a user error is one line and exit status 2; the table `main()`
    returns, where it makes one, becomes `TABLE.md` in bench/results once it completes."""
    from common.cli import install_error_hook

    install_error_hook()
    text = main()
    if table is not None and text is not None:
        write(RESULTS / f"{table}.md", text)
