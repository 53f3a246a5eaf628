"""Backtest a saved StockTrading-v0 agent over the held-out split (2020-01-02..2022-12-28 on the
default data): cumulative and annual return, volatility, Sharpe, max drawdown and Calmar beside
equal-weight buy-and-hold, written as `backtest.md` and `backtest.png` (account values) next to the
checkpoint.

    python bench/stock_backtest.py runs/<run>/checkpoint.pt [--out DIR] [--device cpu]
    python bench/stock_backtest.py --info       # describe the data StockTrading-v0 uses

Reads `STOCK_TRADING_CSV` like the env does (see envs/stock_trading.py), so that train and backtest
see the same data. The checkpoint names the algorithm file that wrote it; that file rebuilds the
policy (`tools.evaluate.load_policy`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common.checkpoint import atomic_write  # noqa: E402
from common.errors import UserError  # noqa: E402
from envs.stock_trading import (
    StockTrading,
    backtest,
    default_data,
    performance,
    plot_account_values,  # noqa: E402
    report_markdown,
)
from tools.evaluate import load_policy  # noqa: E402


def backtest_checkpoint(
    checkpoint: str, out: str | None = None, device: str = "cpu", quiet: bool = False
) -> dict:
    """Backtest the policy in `checkpoint`, write `backtest.md` and `backtest.png` to `out`
    (default: the checkpoint's folder) and return the metrics of the agent and of buy-and-hold."""
    policy, ckpt = load_policy(checkpoint, device)
    if ckpt.get("env_id") != StockTrading.env_id:
        raise UserError(
            f"{checkpoint} was trained on {ckpt.get('env_id')!r}, not {StockTrading.env_id!r}"
        )
    res = backtest(policy, device=device)
    dates, data = res["dates"], res["data"]
    rows = {
        f"agent ({ckpt['algo']})": performance(res["values"]),
        "equal-weight buy-and-hold": performance(res["buy_and_hold"]),
    }
    title = (
        f"Backtest of {checkpoint} on {data.source}, {dates[0]}..{dates[-1]} ({len(dates)} trading "
        f"days, {data.n_stocks} stocks, 0.1% fees on both sides)"
    )
    md = report_markdown(rows, title)
    out_dir = Path(out) if out else Path(checkpoint).resolve().parent
    atomic_write(out_dir / "backtest.md", md)
    plot_account_values(
        dates,
        {"agent": res["values"], "equal-weight buy-and-hold": res["buy_and_hold"]},
        out_dir / "backtest.png",
        title=f"StockTrading-v0 backtest ({data.source})",
    )
    if not quiet:
        print(md)
        print(f"wrote {out_dir / 'backtest.md'} and {out_dir / 'backtest.png'}")
    return {
        "rows": rows,
        "dates": dates,
        "values": res["values"],
        "buy_and_hold": res["buy_and_hold"],
    }


def main(argv: list[str] | None = None) -> int:
    from common.cli import ArgumentParser

    p = ArgumentParser(
        prog="python bench/stock_backtest.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "checkpoint",
        nargs="?",
        help="runs/<run>/checkpoint.pt written by an algorithm trained on StockTrading-v0",
    )
    p.add_argument(
        "--out",
        default=None,
        help="folder for backtest.md and backtest.png (default: the checkpoint's)",
    )
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--info",
        action="store_true",
        help="describe the data StockTrading-v0 uses (default or STOCK_TRADING_CSV) and exit",
    )
    a = p.parse_args(argv)
    if a.info:
        print(default_data().describe())
        return 0
    if a.checkpoint is None:
        p.error("pass the checkpoint to backtest (or --info)")
    try:
        backtest_checkpoint(a.checkpoint, a.out, a.device)
    except (ValueError, FileNotFoundError) as e:  # bad input: one clear line, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    sys.exit(main())
