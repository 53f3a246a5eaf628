"""Backtest a saved StockTrading-v0 agent over the held-out split (2020-01-02..2022-12-28 on the
default data): cumulative and annual return, volatility, Sharpe, max drawdown and Calmar beside
equal-weight buy-and-hold, written as `backtest.md` and `backtest.png` (account values) next to the
checkpoint.

    python -m tools.backtest runs/<run>/checkpoint.pt [--out DIR] [--device cpu]
    python -m tools.backtest --info       # describe the data StockTrading-v0 uses

Reads `STOCK_TRADING_CSV` like the env does (see envs/stock_trading.py), so that train and backtest
see the same data. The checkpoint names the algorithm file that wrote it; that file rebuilds the
policy (`tools.evaluate.load_policy`). From Python: `backtest_checkpoint` below.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common.checkpoint import atomic_write  # noqa: E402
from common.errors import UserError  # noqa: E402
from envs.stock_trading import (  # noqa: E402
    StockTrading,
    backtest,
    default_data,
    performance,
    plot_account_values,
    report_markdown,
)
from tools.evaluate import load_policy  # noqa: E402

BUY_AND_HOLD = "equal-weight buy-and-hold"


def backtest_checkpoint(checkpoint: str, device: str = "cpu") -> dict:
    """Run the deterministic policy in `checkpoint` over the backtest split: the result of
    `envs.stock_trading.backtest` (`dates`, `values`, `buy_and_hold`, `weights`, `data`) plus
    `algo` and `rows`, the metrics (`performance`) of the agent and of buy-and-hold, by name."""
    policy, ckpt = load_policy(checkpoint, device)
    if ckpt.get("env_id") != StockTrading.env_id:
        raise UserError(
            f"{checkpoint} was trained on {ckpt.get('env_id')!r}, not {StockTrading.env_id!r}"
        )
    res = backtest(policy, device=device)
    rows = {
        f"agent ({ckpt['algo']})": performance(res["values"]),
        BUY_AND_HOLD: performance(res["buy_and_hold"]),
    }
    return {**res, "algo": ckpt["algo"], "rows": rows}


@dataclass
class Args:
    checkpoint: Annotated[str | None, tyro.conf.Positional, tyro.conf.arg(metavar="CHECKPOINT")] = (
        None
    )
    """runs/<run>/checkpoint.pt written by an algorithm trained on StockTrading-v0"""
    out: str | None = None
    """folder for backtest.md and backtest.png (default: the checkpoint's)"""
    device: str = "cpu"
    """device to run the policy on"""
    info: bool = False
    """describe the data StockTrading-v0 uses (default or STOCK_TRADING_CSV) and exit"""


def main(args: Args) -> dict | None:
    if args.info:
        print(default_data().describe())
        return None
    if args.checkpoint is None:
        raise UserError(
            "pass the checkpoint to backtest (or --info) — see python -m tools.backtest --help"
        )
    res = backtest_checkpoint(args.checkpoint, args.device)
    dates, data = res["dates"], res["data"]
    md = report_markdown(
        res["rows"],
        f"Backtest of {args.checkpoint} on {data.source}, {dates[0]}..{dates[-1]} ({len(dates)} "
        f"trading days, {data.n_stocks} stocks, 0.1% fees on both sides)",
    )
    out = Path(args.out) if args.out else Path(args.checkpoint).resolve().parent
    atomic_write(out / "backtest.md", md)
    plot_account_values(
        dates,
        {"agent": res["values"], BUY_AND_HOLD: res["buy_and_hold"]},
        out / "backtest.png",
        title=f"StockTrading-v0 backtest ({data.source})",
    )
    print(md)
    print(f"wrote {out / 'backtest.md'} and {out / 'backtest.png'}")
    return res


if __name__ == "__main__":
    from common.cli import cli

    main(cli(Args, __doc__))
