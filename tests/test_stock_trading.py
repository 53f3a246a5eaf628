"""StockTrading-v0 (envs/stock_trading.py) and its data (envs/stock_data.py): the vec-env contract,
trade execution (fees, cash and share limits), the CSV loader, causal indicators, and the backtest
metrics / buy-and-hold baseline on hand-made series with known answers."""

import math
import time

import numpy as np
import pytest
import torch

import envs
from envs.stock_data import FEATURE_NAMES, WARMUP, build, compute_indicators, load_csv, load_sp500
from envs.stock_trading import StockTrading, backtest, buy_and_hold, performance, report_markdown

S_SP500, F = 20, len(FEATURE_NAMES)


def make_data(close, **split):
    close = np.asarray(close, dtype=np.float64)
    dates = np.datetime64("2000-01-03") + np.arange(len(close))
    return build(
        dates, [f"S{i}" for i in range(close.shape[1])], close, source="hand-made", **split
    )


def constant_data(n_days=100, n_stocks=3, price=10.0):
    return make_data(np.full((n_days, n_stocks), price))


def random_walk(n_days=200, n_stocks=4, seed=0):
    rng = np.random.default_rng(seed)
    return 50 * np.exp(np.cumsum(rng.normal(0, 0.02, (n_days, n_stocks)), 0))


# ---- contract ------------------------------------------------------------------------------------
def test_make_defaults_contract():
    env = envs.make("StockTrading-v0", num_envs=8, seed=0)
    assert isinstance(env, StockTrading) and env.split == "train"
    obs_dim = 1 + S_SP500 + S_SP500 * F
    assert env.single_observation_space.shape == (obs_dim,)
    assert env.single_action_space.shape == (S_SP500,)
    assert env.single_action_space.low.min() == -1 and env.single_action_space.high.max() == 1
    assert env.action_space.shape == (8, S_SP500)
    lo, hi = env.first_day, env.last_day
    assert str(env.data.dates[lo]) >= "2010-01-01" and str(env.data.dates[hi]) <= "2019-12-31"
    obs, _ = env.reset(seed=1)
    assert obs.shape == (8, obs_dim) and obs.dtype == torch.float32
    # all cash at the start
    assert torch.all(obs[:, 0] == 1) and torch.all(obs[:, 1 : 1 + S_SP500] == 0)
    starts = env.state[:, -2]
    # own random starts
    assert len(set(starts.tolist())) > 1 and torch.all((starts >= lo) & (starts < hi))
    obs, rew, term, trunc, info = env.step(torch.zeros(8, S_SP500))
    assert rew.shape == (8,) and rew.dtype == torch.float32
    assert term.dtype == torch.bool and trunc.dtype == torch.bool and not term.any()
    assert info["final_obs"].shape == obs.shape and info["_final_obs"].shape == (8,)
    assert info["portfolio_value"].shape == (8,)
    assert torch.allclose(rew, torch.zeros(8))  # all cash: value unchanged
    assert obs.abs().max() <= 5 + 1e-6  # O(1) observations


def test_seeding_reproducible():
    def rollout(seed):
        env = envs.make("StockTrading-v0", num_envs=16, seed=seed)
        gen = torch.Generator().manual_seed(3)
        obs, _ = env.reset(seed=seed)
        out = [obs]
        for _ in range(300):  # crosses autoresets (252-day episodes)
            obs, r, _, _, _ = env.step(torch.rand(16, S_SP500, generator=gen) * 2 - 1)
            out += [obs, r[:, None]]
        return torch.cat(out, 1)

    assert torch.equal(rollout(5), rollout(5))
    assert not torch.equal(rollout(5), rollout(6))


def test_many_envs_fast():
    """One batched step of 65536 sub-envs costs a small fraction of 65536 steps of a one-sub-env
    instance (what a Python loop over sub-envs would cost): timings taken interleaved, so a busy
    machine slows both."""
    n = 65536
    one, big = (
        envs.make("StockTrading-v0", num_envs=1, seed=0),
        envs.make("StockTrading-v0", num_envs=n, seed=0),
    )
    acts = {}
    for env in (one, big):
        env.reset()
        acts[env] = torch.rand(env.num_envs, S_SP500) * 2 - 1
        env.step(acts[env])  # warm-up
    times = {one: [], big: []}
    for _ in range(3):
        for env in (one, big):
            t = time.perf_counter()
            env.step(acts[env])
            times[env].append(time.perf_counter() - t)
    # measured: 0.02 idle, 0.09 with 4 busy processes
    assert min(times[big]) < 0.5 * n * min(times[one]), times


def test_state_dict_roundtrip():
    env = envs.make("StockTrading-v0", num_envs=4, seed=0)
    env.reset(seed=0)
    for _ in range(5):
        env.step(torch.rand(4, S_SP500))
    sd = env.state_dict()
    a = torch.rand(4, S_SP500)
    ref = env.step(a)
    env2 = envs.make("StockTrading-v0", num_envs=4, seed=99)
    env2.load_state_dict(sd)
    got = env2.step(a)
    assert torch.equal(ref[0], got[0]) and torch.equal(ref[1], got[1])


def test_autoreset_only_finished_rows():
    data = make_data(random_walk(120, 3))
    env = StockTrading(num_envs=6, seed=0, data=data, episode_days=5)
    env.reset(seed=0)
    # staggered starts: row i starts i days before the others' end would come
    env.state[:, -3] = env.state[:, -2] = torch.tensor([70.0, 71, 72, 73, 74, 75])
    env.state[:, -1] = torch.tensor([72.0, 80, 80, 75, 80, 80])  # rows 0 and 3 end after 2 steps
    env.step(torch.full((6, 3), 0.5))
    before = env.state.clone()
    obs, _, term, trunc, info = env.step(torch.full((6, 3), 0.5))
    assert trunc.tolist() == [True, False, False, True, False, False] and not term.any()
    assert torch.equal(info["_final_obs"], trunc)
    done = trunc
    # finished rows: fresh state (all cash), their final obs is the last day's observation
    assert torch.all(env.state[done, 0] == env.initial_cash) and torch.all(
        env.state[done, 1:4] == 0
    )
    assert torch.all(obs[done, 0] == 1)
    feats_last = torch.as_tensor(data.features[[72, 75]].reshape(2, -1))
    assert torch.equal(info["final_obs"][done, 4:], feats_last)
    assert torch.all(info["final_obs"][done, 0] < 1)  # it had bought stock
    # unfinished rows: continued (day advanced by one, shares kept), obs == final_obs
    assert torch.all(env.state[~done, -3] == before[~done, -3] + 1)
    assert torch.equal(obs[~done], info["final_obs"][~done])


def test_episode_lengths_train_and_backtest():
    data = make_data(random_walk(150, 2))
    env = StockTrading(num_envs=32, seed=0, data=data, episode_days=10)
    env.reset(seed=0)
    lo, hi = data.split_range("train")
    length = torch.zeros(32, dtype=torch.long)
    lengths = []
    for _ in range(40):
        _, _, _, trunc, _ = env.step(torch.zeros(32, 2))
        length += 1
        lengths += length[trunc].tolist()
        length[trunc] = 0
    assert max(lengths) == 10 and min(lengths) >= 1 and env.state[:, -3].max() <= hi
    bt = StockTrading(num_envs=3, seed=0, data=data, split="backtest")
    blo, bhi = data.split_range("backtest")
    assert blo > hi and bt.episode_days is None and torch.all(bt.state[:, -3] == blo)
    for t in range(bhi - blo):
        _, _, _, trunc, _ = bt.step(torch.zeros(3, 2))
        assert bool(trunc.all()) == (t == bhi - blo - 1)


# ---- execution -----------------------------------------------------------------------------------
def test_round_trip_costs_exactly_two_fees():
    c = 0.001
    env = StockTrading(
        num_envs=1,
        seed=0,
        data=constant_data(),
        transaction_cost=c,
        max_trade=1.0,
        split="backtest",
    )
    env.reset(seed=0)
    a = torch.zeros(1, 3)
    a[0, 0] = 0.5  # buy 50% of the portfolio's value (0.5: exact in float32)
    _, r1, _, _, info1 = env.step(a)
    traded = 0.5 * 1e6
    assert env.state[0, 1].item() == pytest.approx(traded / 10.0, rel=1e-12)  # shares at price 10
    assert info1["portfolio_value"].item() == pytest.approx(1e6 - c * traded, rel=1e-12)
    _, r2, _, _, info2 = env.step(-torch.ones(1, 3))  # sell everything (more than held: capped)
    assert env.state[0, 1:4].abs().max() == 0
    assert info2["portfolio_value"].item() == pytest.approx(1e6 - 2 * c * traded, rel=1e-12)
    assert (r1 + r2).item() == pytest.approx(100 * math.log(1 - 2 * c * traded / 1e6), rel=1e-5)


def test_buying_limited_by_cash():
    c = 0.001
    env = StockTrading(
        num_envs=2,
        seed=0,
        data=constant_data(),
        transaction_cost=c,
        max_trade=1.0,
        split="backtest",
    )
    env.reset(seed=0)
    a = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.5, 0.0]])  # wants 3x / 1.5x the portfolio's value
    env.step(a)
    cash, shares = env.state[:, 0], env.state[:, 1:4]
    assert torch.all(cash == 0)
    value = shares * 10.0
    assert value.sum(1).tolist() == pytest.approx([1e6 / (1 + c)] * 2, rel=1e-12)  # fees included
    assert value[1, 0] / value[1, 1] == pytest.approx(2.0)  # scaled down together
    assert value[1, 2] == 0
    env.step(a)  # no cash left: nothing more can be bought
    assert torch.equal(env.state[:, 1:4], shares)


@pytest.mark.parametrize("kind", ["random", "all_buy", "all_sell", "alternate"])
def test_cash_and_shares_never_negative(kind):
    env = envs.make("StockTrading-v0", num_envs=256, seed=0, max_trade=0.5)
    env.reset(seed=0)
    gen = torch.Generator().manual_seed(0)
    for t in range(300):
        if kind == "random":
            a = torch.rand(256, S_SP500, generator=gen) * 4 - 2  # also outside [-1, 1]: clipped
        elif kind == "all_buy":
            a = torch.ones(256, S_SP500)
        elif kind == "all_sell":
            a = -torch.ones(256, S_SP500)
        else:
            a = torch.ones(256, S_SP500) * (1 if t % 2 else -1)
        _, r, _, _, info = env.step(a)
        assert env.state[:, 0].min() >= 0 and env.state[:, 1 : 1 + S_SP500].min() >= 0
        assert torch.isfinite(r).all() and info["portfolio_value"].min() > 0


def test_invalid_actions_rejected():
    env = StockTrading(num_envs=2, seed=0, data=constant_data())
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="finite"):
        env.step(torch.full((2, 3), float("nan")))
    with pytest.raises(ValueError, match="split"):
        StockTrading(num_envs=2, data=constant_data(), split="test")


# ---- data ----------------------------------------------------------------------------------------
def test_sp500_default_split():
    d = load_sp500()
    assert d.n_stocks == 20 and d.tickers[0] == "AAPL"
    assert str(d.dates[0]) == "1990-01-02" and str(d.dates[-1]) == "2022-12-28"
    lo, hi = d.split_range("backtest")
    assert str(d.dates[lo]) == "2020-01-02" and str(d.dates[hi]) == "2022-12-28"
    lo, hi = d.split_range("train")
    assert str(d.dates[lo]) == "2010-01-04" and str(d.dates[hi]) == "2019-12-31"
    assert d.features.shape == (len(d.dates), 20, F) and np.isfinite(d.features).all()


def test_missing_skfolio_names_the_fix(monkeypatch):
    import importlib.util

    from envs import stock_data

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install skfolio==1\.12\.2"):
        stock_data.skfolio_sp500_path()


def test_indicators_no_lookahead():
    close = random_walk(300, 3, seed=1)
    high, low = close * 1.01, close * 0.99
    base = compute_indicators(close, high, low)
    for t in (WARMUP, 150, 298):
        changed = close.copy()
        changed[t + 1 :] *= np.exp(np.random.default_rng(t).normal(0, 0.3, changed[t + 1 :].shape))
        new = compute_indicators(changed, changed * 1.01, changed * 0.99)
        np.testing.assert_array_equal(new[: t + 1], base[: t + 1])
        assert not np.array_equal(new[t + 1 :], base[t + 1 :])
    assert np.abs(base).max() <= 5 and np.isfinite(base).all()
    # the backtest's first day has its indicators from earlier prices (computed before splitting)
    d = load_sp500()
    lo, _ = d.split_range("backtest")
    np.testing.assert_array_equal(d.features[lo], compute_indicators(d.close[: lo + 1])[lo])


def test_indicator_values():
    close = np.full((100, 1), 20.0)
    close[80:] = 20 * 1.01 ** np.arange(1, 21)[:, None]  # rises 1% a day from day 80
    f = compute_indicators(close)
    k = {n: i for i, n in enumerate(FEATURE_NAMES)}
    assert np.all(f[:80] == 0)  # flat prices: every indicator 0
    assert f[90, 0, k["ret_1"]] == pytest.approx(50 * math.log(1.01), rel=1e-5)
    assert f[90, 0, k["ret_5"]] == pytest.approx(20 * 5 * math.log(1.01), rel=1e-5)
    assert f[90, 0, k["rsi_14"]] == pytest.approx(1.0)  # only gains
    assert f[90, 0, k["macd"]] > 0 and f[90, 0, k["close_sma30"]] > 0 and f[90, 0, k["cci_20"]] > 0


LONG_CSV = "Date,Tic,Open,High,Low,Close,Volume\n" + "".join(
    f"{np.datetime64('2021-01-01') + i},{t},1,{p * 1.01:.4f},{p * 0.99:.4f},{p:.4f},100\n"
    for i in range(100)
    for t, p in (("AAA", 10 + 0.1 * i), ("BBB", 20 + 0.05 * i))
    if not (t == "BBB" and i == 50)
)


def test_load_csv_long(tmp_path):
    path = tmp_path / "long.csv"
    path.write_text(LONG_CSV)
    with pytest.warns(UserWarning, match="dropped 1 of 100 dates"):
        d = load_csv(path)
    assert d.tickers == ["AAA", "BBB"] and len(d.dates) == 99 and d.dropped_dates == 1
    assert d.close[0].tolist() == [10.0, 20.0] and d.high is not None
    assert np.datetime64("2021-02-20") not in d.dates  # day 50: BBB had no row
    lo, hi = d.split_range("train")
    blo, bhi = d.split_range("backtest")
    assert lo == WARMUP and blo == hi + 1 and bhi == 98  # 80% / 20% after the warm-up
    with pytest.warns(UserWarning, match="dropped 1 of 100 dates"):  # the missing price is BBB's
        d2 = load_csv(path, tickers=["BBB"], backtest_start="2021-03-20")
    assert d2.tickers == ["BBB"] and str(d2.dates[d2.split_range("backtest")[0]]) == "2021-03-20"
    # `ticker`/`symbol` for `tic`, lower-case columns, no high/low
    alt = tmp_path / "alt.csv"
    alt.write_text(
        "date,symbol,close\n"
        + "".join(f"{np.datetime64('2021-01-01') + i},X,{5 + i}\n" for i in range(90))
    )
    d3 = load_csv(alt)
    assert d3.tickers == ["X"] and d3.high is None and d3.close[-1, 0] == 94


def test_load_csv_wide(tmp_path):
    rows = [
        f"{np.datetime64('2021-01-01') + i},{10 + i},{'' if i == 7 else 30 - 0.1 * i}"
        for i in range(100)
    ]
    path = tmp_path / "wide.csv"
    path.write_text("date,AAA,BBB\n" + "\n".join(rows) + "\n")
    with pytest.warns(UserWarning, match="dropped 1"):
        d = load_csv(path)
    assert d.tickers == ["AAA", "BBB"] and len(d.dates) == 99
    env = StockTrading(num_envs=2, seed=0, data=d, split="backtest")
    assert env.single_observation_space.shape == (1 + 2 + 2 * F,)


@pytest.mark.parametrize(
    "text, match",
    [
        ("date,tic,open\n2021-01-01,A,1\n", "missing column.*close"),
        ("day_of_year,close\n1,2\n2,3\n", "no date column"),
        (
            "date,A,B\n"
            + "".join(f"{np.datetime64('2021-01-01') + i},{1 + i},2\n" for i in range(30)),
            "at least 80",
        ),
        (
            "date,A,B\n"
            + "".join(
                f"{np.datetime64('2021-01-01') + i},{1 + i},{0 if i == 40 else 2}\n"
                for i in range(100)
            ),
            "non-positive.*B on 2021-02-10",
        ),
        (
            "date,A\n" + "".join(f"{np.datetime64('2021-01-01') + i},abc\n" for i in range(100)),
            "not a number",
        ),
    ],
)
def test_load_csv_errors(tmp_path, text, match):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_csv(path)


def test_load_csv_unknown_ticker(tmp_path):
    path = tmp_path / "long.csv"
    path.write_text(LONG_CSV)
    with pytest.raises(ValueError, match="unknown ticker.*ZZZ.*AAA, BBB"):
        load_csv(path, tickers=["AAA", "ZZZ"])
    with pytest.raises(FileNotFoundError):
        load_csv(tmp_path / "nope.csv")


def test_env_reads_stock_trading_csv(tmp_path, monkeypatch):
    path = tmp_path / "long.csv"
    path.write_text(LONG_CSV)
    monkeypatch.setenv("STOCK_TRADING_CSV", str(path))
    with pytest.warns(UserWarning):
        env = envs.make("StockTrading-v0", num_envs=3, seed=0)
    assert env.data.tickers == ["AAA", "BBB"] and env.single_action_space.shape == (2,)
    monkeypatch.setenv("STOCK_TRADING_BACKTEST_START", "2021-03-25")
    with pytest.warns(UserWarning):
        env = envs.make("StockTrading-v0", num_envs=1, split="backtest")
    assert str(env.dates()[0]) == "2021-03-25"
    monkeypatch.setenv("STOCK_TRADING_CSV", str(tmp_path / "missing.csv"))
    with pytest.raises(FileNotFoundError, match="STOCK_TRADING_CSV"):
        envs.make("StockTrading-v0", num_envs=1)


# ---- backtest ------------------------------------------------------------------------------------
def test_performance_steady_growth():
    v = 100 * 1.01 ** np.arange(253)  # +1% every day for 252 days
    m = performance(v)
    assert m["cumulative_return"] == pytest.approx(1.01**252 - 1, rel=1e-12)
    assert m["annual_return"] == pytest.approx(1.01**252 - 1, rel=1e-12)  # exactly one year
    assert m["annual_volatility"] == 0 and m["sharpe"] == math.inf
    assert m["max_drawdown"] == 0 and m["calmar"] == math.inf
    m2 = performance(100 * 1.01 ** np.arange(127))  # half a year: CAGR = 1.01^252 - 1 too
    assert m2["annual_return"] == pytest.approx(1.01**252 - 1, rel=1e-10)
    assert m2["cumulative_return"] == pytest.approx(1.01**126 - 1, rel=1e-12)


def test_performance_drawdown_and_calmar():
    v = np.array([100, 120, 90, 110, 60, 80, 130], dtype=float)
    m = performance(v, periods_per_year=6)  # six periods = one year
    assert m["max_drawdown"] == pytest.approx(60 / 120 - 1)  # peak 120 -> trough 60: -50%
    assert m["annual_return"] == pytest.approx(0.3)
    assert m["calmar"] == pytest.approx(0.3 / 0.5)
    assert m["cumulative_return"] == pytest.approx(0.3)


def test_performance_sharpe_alternating():
    r = np.array([0.02, -0.01] * 50)  # alternating daily returns
    v = 100 * np.concatenate([[1.0], np.cumprod(1 + r)])
    m = performance(v)
    mean = 0.005
    std = math.sqrt(100 * 0.015**2 / 99)  # deviations are +-0.015, sample std (ddof=1)
    assert m["sharpe"] == pytest.approx(mean / std * math.sqrt(252), rel=1e-9)
    assert m["annual_volatility"] == pytest.approx(std * math.sqrt(252), rel=1e-9)
    assert m["max_drawdown"] == pytest.approx(-0.01)
    with pytest.raises(ValueError):
        performance([100.0])


def test_buy_and_hold_by_hand():
    p = np.array([[10.0, 20.0], [11.0, 20.0], [12.0, 10.0]])
    v = buy_and_hold(p, initial_cash=1000.0, transaction_cost=0.01)
    shares = np.array([500 / 1.01 / 10, 500 / 1.01 / 20])
    np.testing.assert_allclose(v, [1000.0, shares @ p[1], shares @ p[2]], rtol=1e-12)
    assert v[2] == pytest.approx((60 + 25) / 1.01 * 10)
    assert buy_and_hold(p, 1000.0, 0.0)[-1] == pytest.approx(500 * 1.2 + 500 * 0.5)


def test_backtest_buy_everything_equals_buy_and_hold():
    data = make_data(random_walk(200, 4, seed=3))
    # all-in on day 0, then no cash
    res = backtest(lambda obs: torch.ones(obs.shape[0], 4), data=data, max_trade=1.0)
    lo, hi = data.split_range("backtest")
    assert len(res["values"]) == len(res["dates"]) == hi - lo + 1 and res["values"][0] == 1e6
    np.testing.assert_allclose(res["values"], res["buy_and_hold"], rtol=1e-10)
    hold = backtest(lambda obs: torch.zeros(obs.shape[0], 4), data=data)  # never trades: flat
    assert np.all(hold["values"] == 1e6)
    md = report_markdown(
        {"agent": performance(res["values"]), "buy-and-hold": performance(res["buy_and_hold"])}
    )
    assert md.count("\n") == 4 and "Sharpe ratio" in md and "max drawdown" in md


def test_backtest_cli_end_to_end(tmp_path):
    """`python -m tools.backtest CHECKPOINT`, and bench/stock_trading.py's report over a group's
    seeds (what `bench/run.py quick` runs after its rows) built on it."""
    from algos import ppo_vec
    from bench import experiments, stock_trading
    from common.errors import UserFileNotFoundError
    from tools.backtest import Args, backtest_checkpoint
    from tools.backtest import main as cli_main

    out = ppo_vec.main(
        ppo_vec.Args(
            env="StockTrading-v0",
            num_envs=8,
            num_steps=8,
            num_minibatches=2,
            total_steps=64,
            eval_every=0,
            eval_episodes=2,
            save_every=0,
            out_dir=str(tmp_path),
            quiet=True,
        )
    )
    res = cli_main(Args(out["checkpoint"], out=str(tmp_path / "bt")))
    assert set(res["rows"]) == {"agent (ppo_vec)", "equal-weight buy-and-hold"}
    md = (tmp_path / "bt" / "backtest.md").read_text()
    assert "equal-weight buy-and-hold" in md and "2020-01-02..2022-12-28" in md
    assert (tmp_path / "bt" / "backtest.png").stat().st_size > 10_000

    row = next(r for r in experiments.group("quick") if r.env == "StockTrading-v0")
    run = {**backtest_checkpoint(out["checkpoint"]), "secs": 12.0, "eval": 20.0}
    md = stock_trading.write_report(row, {1: run, 2: run}, tmp_path / "group")
    assert md == (tmp_path / "group" / "stock_trading.md").read_text()
    for text in (
        "| PPO seed 2 |",
        "| PPO mean over seeds |",
        "| equal-weight buy-and-hold |",
        "12 s per seed on average",
        "on cumulative return: ",
        "eval return 20.0 = about 22% a year (backtest ",
        "Largest average backtest positions: seed 1: ",
        "Published reference: ElegantRL-Podracer",
        "Calmar annual / |max drawdown|",
        "![account values](stock_trading.png)",
    ):
        assert text in md, text
    assert (tmp_path / "group" / "stock_trading.png").stat().st_size > 10_000
    with pytest.raises(UserFileNotFoundError, match="python bench/run.py nope --only StockTrading"):
        stock_trading.seed_run("nope", row, 1)
