"""Train algos/ppo_vec.py on StockTrading-v0 (skfolio S&P 500 data, train split 2010-2019) for
several seeds, backtest each agent on 2020-01-02..2022-12-28 and compare it with equal-weight
buy-and-hold. Writes bench/results/stock_trading.md and bench/results/stock_trading.png.

    OMP_NUM_THREADS=1 python bench/stock_trading.py --seeds 1 2 3
    python bench/stock_trading.py --from-group quick
        # backtest the agents `bench/run.py quick` trained (no training here); writes to
        # bench/results/quick/

The PPO settings (`PPO_STOCK`) were chosen for a 2-4 minute run on one CPU thread and were not
tuned on the backtest period.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from algos import ppo_vec  # noqa: E402
from common.checkpoint import atomic_write  # noqa: E402
from envs.stock_trading import (  # noqa: E402
    METRICS,
    backtest,
    performance,
    plot_account_values,
    report_markdown,
)
from tools.evaluate import load_policy  # noqa: E402

PPO_STOCK = dict(
    env="StockTrading-v0",
    num_envs=256,
    num_steps=64,
    total_steps=5_000_000,
    learning_rate=3e-4,
    num_minibatches=8,
    update_epochs=4,
    eval_every=0,
    save_every=0,
    quiet=True,
)

REFERENCE = (
    "ElegantRL-Podracer (Liu et al. 2021, arXiv:2112.05923), NASDAQ-100 minute data, backtest "
    "2020-05-26..2021-05-26: cumulative return 104.7%, Sharpe 2.20, max drawdown -17.2% (published "
    "numbers; a different dataset, frequency and period, so not comparable one to one)"
)


def main() -> str:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--total-steps", type=int, default=PPO_STOCK["total_steps"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--out", default=None, help="default: bench/results (bench/results/GROUP with --from-group)"
    )
    p.add_argument(
        "--from-group",
        metavar="GROUP",
        help="backtest the StockTrading-v0 agents of a bench/run.py "
        "group (its checkpoints under bench/runs/GROUP/) instead of training here",
    )
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    rows, curves, train_secs, train_eval, holdings = {}, {}, {}, {}, {}
    res = None
    settings = " ".join(
        f"--{k.replace('_', '-')} {v}"
        for k, v in {**PPO_STOCK, "total_steps": a.total_steps}.items()
        if k not in ("env", "quiet")
    )
    if a.from_group:
        import experiments

        exp = next(e for e in experiments.group(a.from_group) if e.env == "StockTrading-v0")
        a.seeds = list(exp.seeds)
        settings = " ".join(exp.command(a.seeds[0], "runs", "python")[2:]).replace(
            f"--seed {a.seeds[0]} ", ""
        )
        settings = settings.replace("--env StockTrading-v0 ", "")
    for seed in a.seeds:
        with tempfile.TemporaryDirectory() as out:
            # the group's run: its checkpoint, its clock and its last (train-split) evaluation
            if a.from_group:
                found = sorted(
                    (
                        ROOT
                        / "bench"
                        / "runs"
                        / a.from_group
                        / f"StockTrading-v0__{exp.label}__s{seed}"
                    ).glob("*/checkpoint.pt")
                )
                if not found:
                    raise SystemExit(
                        f"no StockTrading-v0 checkpoint of seed {seed} under "
                        f"bench/runs/{a.from_group}/: run `python bench/run.py "
                        f"{a.from_group} --only StockTrading-v0` first"
                    )
                log = [
                    json.loads(line)
                    for line in open(found[-1].parent / "metrics.jsonl")
                    if line.strip()
                ]
                evals = [r for r in log if r.get("eval_return") is not None]
                summary = {"checkpoint": str(found[-1]), "eval_return": evals[-1]["eval_return"]}
                train_secs[seed] = log[-1]["seconds"]
            else:
                t0 = time.perf_counter()
                summary = ppo_vec.main(
                    ppo_vec.Args(
                        seed=seed, out_dir=out, **{**PPO_STOCK, "total_steps": a.total_steps}
                    )
                )
                train_secs[seed] = time.perf_counter() - t0
            train_eval[seed] = summary["eval_return"]
            policy, _ = load_policy(summary["checkpoint"])
            res = backtest(policy)
        w = res["weights"].mean(0)  # average cash and position fractions over the backtest
        top = np.argsort(-w[1:])[:3]
        holdings[seed] = (
            ", ".join(f"{res['data'].tickers[i]} {100 * w[1 + i]:.0f}%" for i in top)
            + f", cash {100 * w[0]:.0f}%"
        )
        rows[f"PPO seed {seed}"] = performance(res["values"])
        curves[f"PPO seed {seed}"] = res["values"]
        m = rows[f"PPO seed {seed}"]
        print(
            f"seed {seed}: trained {train_secs[seed]:.0f} s (train-split eval return "
            f"{summary['eval_return']:.1f}); "
            f"backtest cumulative {100 * m['cumulative_return']:.1f}%, Sharpe {m['sharpe']:.2f}, "
            f"max DD {100 * m['max_drawdown']:.1f}%",
            flush=True,
        )
    agents = list(rows.values())
    mean = {k: float(np.mean([r[k] for r in agents])) for k, _, _ in METRICS}
    if len(agents) > 1:
        rows["PPO mean over seeds"] = mean
    bh = performance(res["buy_and_hold"])
    rows["equal-weight buy-and-hold"] = bh
    curves["equal-weight buy-and-hold"] = res["buy_and_hold"]
    dates, data = res["dates"], res["data"]
    beats = [s for s, r in zip(a.seeds, agents) if r["cumulative_return"] > bh["cumulative_return"]]
    sharpe_beats = [s for s, r in zip(a.seeds, agents) if r["sharpe"] > bh["sharpe"]]
    lines = [
        "# StockTrading-v0: PPO backtest",
        "",
        f"Data: {data.describe()}. Initial cash 1,000,000, 0.1% fee on every trade (both sides), "
        f"max trade 10% of the portfolio value per stock and day, fractional shares.",
        "",
        f"Training: `OMP_NUM_THREADS=1 python algos/ppo_vec.py --env StockTrading-v0 {settings}` "
        f"(one CPU thread, {np.mean(list(train_secs.values())):.0f} s per seed on average: "
        + ", ".join(f"seed {s} {t:.0f} s" for s, t in train_secs.items())
        + "), 252-day episodes from random "
        f"start days of 2010-2019. Backtest: the deterministic policy, {dates[0]}..{dates[-1]} "
        f"({len(dates)} trading days), starting from all cash (`python bench/stock_backtest.py "
        "<checkpoint>`). No setting was tuned on the backtest period.",
        "",
        report_markdown(rows).rstrip(),
        "",
        "Agent minus equal-weight buy-and-hold: "
        + "; ".join(
            f"seed {s}: cumulative return "
            f"{100 * (r['cumulative_return'] - bh['cumulative_return']):+.1f} "
            f"points, Sharpe {r['sharpe'] - bh['sharpe']:+.2f}, max drawdown "
            f"{100 * (r['max_drawdown'] - bh['max_drawdown']):+.1f} points"
            for s, r in zip(a.seeds, agents)
        )
        + f". Seeds beating buy-and-hold on cumulative return: {len(beats)} of {len(agents)}"
        f"{' (' + ', '.join(map(str, beats)) + ')' if beats else ''}; on Sharpe ratio: "
        f"{len(sharpe_beats)} of {len(agents)}. In-sample (252-day episodes of 2010-2019) "
        f"the agents earn "
        + (
            "far more than in the backtest"
            if all(
                np.exp(train_eval[s] / 100) - 1 > r["annual_return"]
                for s, r in zip(a.seeds, agents)
            )
            else "per year"
        )
        + ": "
        + ", ".join(
            f"seed {s} eval return {train_eval[s]:.1f} = about "
            f"{100 * (np.exp(train_eval[s] / 100) - 1):.0f}% a year"
            for s in a.seeds
        )
        + " (return = 100 * log growth). Largest average backtest positions: "
        + "; ".join(f"seed {s}: {holdings[s]}" for s in a.seeds)
        + " (the 2010-2019 price gains, end/start: "
        + ", ".join(
            f"{t} {g:.1f}x"
            for g, t in sorted(
                zip(data.split_close("train")[-1] / data.split_close("train")[0], data.tickers),
                reverse=True,
            )[:5]
        )
        + ").",
        "",
        f"Published reference: {REFERENCE}.",
        "",
        "Metrics (`envs.stock_trading.performance`, daily simple returns r): cumulative v_n/v_0 - "
        "1; annual (v_n/v_0)^(252/n) - 1; volatility std(r, ddof=1)*sqrt(252); Sharpe "
        "mean(r)/std(r)*sqrt(252), risk-free 0; max drawdown min(v_t / running max - 1); Calmar "
        "annual / |max drawdown|.",
        "",
        "![account values](stock_trading.png)",
    ]
    md = "\n".join(lines) + "\n"
    out = Path(a.out or ROOT / "bench" / "results" / (a.from_group or ""))
    atomic_write(out / "stock_trading.md", md)
    plot_account_values(
        dates,
        curves,
        out / "stock_trading.png",
        title=f"StockTrading-v0 backtest ({data.source}), PPO vs equal-weight buy-and-hold",
    )
    print("\n" + md)
    return md


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
