"""Draw a run's curves (return against env steps and against seconds of training, the training
episodes and the evaluations) from its `metrics.jsonl`, at any time: during a run, after one that
was stopped, or again after the run drew them at its end.

    python -m tools.plot runs/<run>                  # writes runs/<run>/curves.png
    python -m tools.plot runs/<run> --out curves.png
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common.errors import UserFileNotFoundError  # noqa: E402
from common.logger import plot_curves  # noqa: E402


@dataclass
class Args:
    run_dir: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR")]
    """a run directory (it holds metrics.jsonl)"""
    out: str | None = None
    """where to write the PNG (default: RUN_DIR/curves.png)"""


def main(args: Args) -> Path:
    metrics = Path(args.run_dir) / "metrics.jsonl"
    if not metrics.is_file():
        raise UserFileNotFoundError(f"no metrics.jsonl in {args.run_dir}: pass a run directory")
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    out = Path(args.out) if args.out else Path(args.run_dir) / "curves.png"
    plot_curves(rows, out, title=Path(args.run_dir).name)
    print(f"curves written to {out}")
    return out


if __name__ == "__main__":
    from common.cli import cli

    main(cli(Args, __doc__))
