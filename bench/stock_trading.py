"""Backtest the StockTrading-v0 agents a bench/run.py group trained (its row's seeds, checkpoints
under bench/runs/GROUP/) over 2020-01-02..2022-12-28 with `tools/backtest.py`, against equal-weight
buy-and-hold; writes stock_trading.md and .png to bench/results/GROUP/. `bench/run.py quick` (and
full) runs it after its rows: `python bench/stock_trading.py --from-group quick [--out DIR]`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench import experiments  # noqa: E402
from common.checkpoint import atomic_write  # noqa: E402
from common.cli import ArgumentParser, install_error_hook  # noqa: E402
from common.errors import UserFileNotFoundError  # noqa: E402
from envs.stock_trading import METRICS, plot_account_values, report_markdown  # noqa: E402
from tools.backtest import BUY_AND_HOLD, backtest_checkpoint  # noqa: E402


def seed_run(group: str, row, seed: int) -> dict:
    """The backtest of a seed's checkpoint, with its training seconds and last (in-sample) eval."""
    found = sorted((ROOT / "bench" / "runs" / group / row.key(seed)).glob("*/checkpoint.pt"))
    if not found:
        raise UserFileNotFoundError(
            f"no StockTrading-v0 checkpoint of seed {seed} under bench/runs/{group}/: run "
            f"`python bench/run.py {group} --only StockTrading-v0` first"
        )
    log = [json.loads(s) for s in open(found[-1].parent / "metrics.jsonl") if s.strip()]
    evals = [r["eval_return"] for r in log if r.get("eval_return") is not None]
    return {**backtest_checkpoint(str(found[-1])), "secs": log[-1]["seconds"], "eval": evals[-1]}


def write_report(row, runs: dict[int, dict], out: Path) -> str:
    """stock_trading.md and stock_trading.png in `out` from each seed's `seed_run`."""
    first = next(iter(runs.values()))
    dates, data, bh = first["dates"], first["data"], first["rows"][BUY_AND_HOLD]
    agents = {s: next(iter(r["rows"].values())) for s, r in runs.items()}
    rows = {f"PPO seed {s}": m for s, m in agents.items()}
    rows["PPO mean over seeds"] = {k: np.mean([m[k] for m in agents.values()]) for k, *_ in METRICS}
    beats = [s for s, m in agents.items() if m["cumulative_return"] > bh["cumulative_return"]]
    held = {s: r["weights"].mean(0) for s, r in runs.items()}  # average cash and positions
    train = data.split_close("train")
    flags = " ".join(row.command(row.seeds[0], "runs", "python")[6:])  # after --env E --seed S
    curves = {f"PPO seed {s}": r["values"] for s, r in runs.items()}
    plot_account_values(
        dates,
        {**curves, BUY_AND_HOLD: first["buy_and_hold"]},
        out / "stock_trading.png",
        title=f"StockTrading-v0 backtest ({data.source}), PPO vs {BUY_AND_HOLD}",
    )
    md = "\n\n".join([
        "# StockTrading-v0: PPO backtest",
        f"Data: {data.describe()}. Initial cash 1,000,000, 0.1% fee on every trade (both sides), "
        "max trade 10% of the portfolio value per stock and day, fractional shares.",
        f"Training: `OMP_NUM_THREADS=1 python algos/ppo_vec.py --env StockTrading-v0 {flags}` (one "
        f"CPU thread, {np.mean([r['secs'] for r in runs.values()]):.0f} s per seed on average: "
        + ", ".join(f"seed {s} {r['secs']:.0f} s" for s, r in runs.items())
        + "), 252-day episodes from random start days of 2010-2019. Backtest: the deterministic "
        f"policy, {dates[0]}..{dates[-1]} ({len(dates)} trading days), starting from all cash "
        "(`python -m tools.backtest <checkpoint>`). No setting was tuned on the backtest period.",
        report_markdown({**rows, BUY_AND_HOLD: bh}).rstrip(),
        f"Seeds beating buy-and-hold on cumulative return: {len(beats)} of {len(agents)}"
        + (f" ({', '.join(map(str, beats))})" if beats else "")
        + f"; on Sharpe ratio: {sum(m['sharpe'] > bh['sharpe'] for m in agents.values())} of "
        f"{len(agents)}. In-sample (252-day episodes of 2010-2019; return = 100 * log growth) "
        "against the backtest's annual return: "
        + ", ".join(
            f"seed {s} eval return {runs[s]['eval']:.1f} = about "
            f"{100 * np.expm1(runs[s]['eval'] / 100):.0f}% a year (backtest "
            f"{100 * m['annual_return']:.1f}%)" for s, m in agents.items())
        + ". Largest average backtest positions: "
        + "; ".join(
            f"seed {s}: "
            + ", ".join(f"{data.tickers[i]} {100 * w[1 + i]:.0f}%" for i in np.argsort(-w[1:])[:3])
            + f", cash {100 * w[0]:.0f}%" for s, w in held.items())
        + " (the 2010-2019 price gains, end/start: "
        + ", ".join(f"{t} {g:.1f}x" for g, t in sorted(
            zip(train[-1] / train[0], data.tickers), reverse=True)[:5])
        + ").",
        "Published reference: ElegantRL-Podracer (Liu et al. 2021, arXiv:2112.05923), NASDAQ-100 "
        "minute data, backtest 2020-05-26..2021-05-26: cumulative return 104.7%, Sharpe 2.20, max "
        "drawdown -17.2% (published numbers; a different dataset, frequency and period, so not "
        "comparable one to one).",
        "Metrics (`envs.stock_trading.performance`, daily simple returns r): cumulative v_n/v_0 - "
        "1; annual (v_n/v_0)^(252/n) - 1; volatility std(r, ddof=1)*sqrt(252); Sharpe "
        "mean(r)/std(r)*sqrt(252), risk-free 0; max drawdown min(v_t / running max - 1); Calmar "
        "annual / |max drawdown|.",
        "![account values](stock_trading.png)\n",
    ])  # fmt: skip
    atomic_write(out / "stock_trading.md", md)
    return md


def main() -> None:
    p = ArgumentParser(description=__doc__)
    p.add_argument("--from-group", metavar="GROUP", required=True, help="quick or full")
    p.add_argument("--out", help="default: bench/results/GROUP")
    a = p.parse_args()
    rows = [r for r in experiments.group(a.from_group) if r.env == "StockTrading-v0"]
    row = rows[0] if rows else p.error(f"group {a.from_group} has no StockTrading-v0 row")
    runs = {s: seed_run(a.from_group, row, s) for s in row.seeds}
    print(write_report(row, runs, Path(a.out or ROOT / "bench" / "results" / a.from_group)))


if __name__ == "__main__":
    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
