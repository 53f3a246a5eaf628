"""`StockTrading-v0`: FinRL-style multi-stock daily trading as a torch-native batched environment,
plus the backtest (metrics, equal-weight buy-and-hold baseline, report); the command line that
backtests a saved agent is `tools/backtest.py`.

    env = envs.make("StockTrading-v0", num_envs=1024, seed=0)  # skfolio S&P 500, train split
    env = envs.make("StockTrading-v0", split="backtest", data=load_csv("my_prices.csv"))
    STOCK_TRADING_CSV=my_prices.csv python algos/ppo_vec.py --env StockTrading-v0 ...
    python -m tools.backtest runs/<run>/checkpoint.pt [--out DIR]

Data (`envs/stock_data.py`): skfolio's S&P 500 dataset by default (20 stocks, daily adjusted
closes; train 2010-01-01..2019-12-31, backtest 2020-01-01..2022-12-28), or `data=` a loaded
`StockData`, or the CSV named by the environment variable `STOCK_TRADING_CSV` when no `data` is
passed (then `STOCK_TRADING_BACKTEST_START=YYYY-MM-DD` optionally sets the split date; otherwise
80% / 20%). The backtest command reads the same variable, so train and backtest see the same data.

The market, each sub-env and day t (S stocks, prices = daily closes p_t):

* State (float64, `[N, S + 4]`): cash, shares held per stock (fractional, never negative), the
  current day index, the episode's start and last day indices.
* Observation (float32, `1 + S + S * F`): cash / V, each stock's position value / V (V = portfolio
  value = cash + shares . p_t), then the `F = 9` indicators of each stock on day t (returns over
  1/5/20 days, MACD / price, RSI, CCI, close / SMA30 and SMA60, 20-day volatility; all O(1), from
  prices up to t only).
* Action: Box(-1, 1, (S,)), clipped. a_i > 0 buys a_i * max_trade * V worth of stock i, a_i < 0
  sells |a_i| * max_trade * V worth (`max_trade`, default 0.1, is a fraction of the portfolio
  value, not FinRL's share count `hmax`). Trades execute at the close p_t: sells first, each capped
  at the shares held; then the buys are scaled down together so that their cost, fees included,
  never exceeds the cash. Each traded value pays `transaction_cost` (default 0.1%), on buys and
  on sells.
* Reward: `reward_scale * log(V_{t+1} / V_t)`, V_t the value before day t's trades and V_{t+1}
  after them at day t+1's close (fees included); the episode's return sums to
  `reward_scale * log(final / initial value)`. (A log return, not a value change: its scale does
  not grow with the portfolio.)
* Episodes: training sub-envs start on a uniformly random day of the split (each its own, from
  the env's `torch.Generator`) with `initial_cash` and no shares, and run `episode_days` steps or
  until the split's last day; the end is a truncation (the market goes on), never a termination.
  In the backtest split every sub-env starts on the first day and runs to the last
  (`episode_days="auto"` means 252 in "train" and None, the whole split, in "backtest").
  `info["portfolio_value"]` is V after every step (before any autoreset); `env.portfolio_value()` is
  V of the current state.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from common.errors import UserError
from envs.base import TorchVecEnv
from envs.stock_data import StockData, from_env_var, load_sp500

__all__ = [
    "StockTrading",
    "default_data",
    "performance",
    "buy_and_hold",
    "backtest",
    "report_markdown",
    "plot_account_values",
    "METRICS",
]


def default_data() -> StockData:
    """The data `StockTrading-v0` uses when none is passed: `STOCK_TRADING_CSV`, else skfolio's S&P
    500."""
    return from_env_var() or load_sp500()


class StockTrading(TorchVecEnv):
    """Multi-stock daily trading (see the module docstring)."""

    env_id = "StockTrading-v0"

    def __init__(
        self,
        num_envs: int = 1,
        device="cpu",
        dtype=torch.float64,
        seed=None,
        *,
        split: str = "train",
        data: StockData | None = None,
        initial_cash: float = 1e6,
        transaction_cost: float = 0.001,
        max_trade: float = 0.1,
        episode_days: int | None | str = "auto",
        reward_scale: float = 100.0,
        **kw,
    ):
        if split not in ("train", "backtest"):
            raise UserError(f"split must be 'train' or 'backtest', got {split!r}")
        if initial_cash <= 0 or not 0 <= transaction_cost < 1 or max_trade <= 0:
            raise UserError("need initial_cash > 0, 0 <= transaction_cost < 1 and max_trade > 0")
        # a year of trading days in training; the whole split in the backtest
        if episode_days == "auto":
            episode_days = 252 if split == "train" else None
        if episode_days is not None and (not isinstance(episode_days, int) or episode_days < 1):
            raise UserError(f"episode_days must be >= 1 or None, got {episode_days}")
        self.data = data if data is not None else default_data()
        self.split = split
        self.initial_cash, self.transaction_cost = float(initial_cash), float(transaction_cost)
        self.max_trade, self.reward_scale = float(max_trade), float(reward_scale)
        self.episode_days = episode_days
        self.first_day, self.last_day = self.data.split_range(split)
        dev = torch.device(device)
        S, F = self.data.n_stocks, self.data.features.shape[-1]
        self.n_stocks = S
        # [T, S]
        self.prices = torch.as_tensor(self.data.close, dtype=torch.float64, device=dev)
        self.features = torch.as_tensor(
            self.data.features.reshape(len(self.data.dates), S * F), device=dev
        )
        obs_space = gym.spaces.Box(-np.inf, np.inf, (1 + S + S * F,), np.float32)
        act_space = gym.spaces.Box(-1.0, 1.0, (S,), np.float32)
        if dtype != torch.float64:
            raise UserError("StockTrading keeps cash and shares in float64 (dtype=torch.float64)")
        super().__init__(num_envs, obs_space, act_space, dev, dtype, seed, **kw)

    # state columns: 0 cash | 1..S shares | S+1 day | S+2 start day | S+3 last day of the episode
    def _split_state(self, state):
        S = self.n_stocks
        return state[:, 0], state[:, 1 : S + 1], state[:, S + 1], state[:, S + 2], state[:, S + 3]

    def _sample_initial_state(self, n: int) -> torch.Tensor:
        lo, hi = self.first_day, self.last_day
        if self.split == "train":  # uniformly random start in [lo, hi - 1]
            u = torch.rand(n, generator=self.rng, device=self.device, dtype=torch.float64)
            start = (lo + torch.floor(u * (hi - lo))).clamp(max=hi - 1)
        else:
            start = torch.full((n,), float(lo), device=self.device, dtype=torch.float64)
        end = (
            start + self.episode_days
            if self.episode_days is not None
            else torch.full_like(start, float(hi))
        )
        end = end.clamp(max=float(hi))
        state = torch.zeros(n, self.n_stocks + 4, dtype=torch.float64, device=self.device)
        state[:, 0] = self.initial_cash
        state[:, self.n_stocks + 1] = start
        state[:, self.n_stocks + 2] = start
        state[:, self.n_stocks + 3] = end
        return state

    def _value(self, cash, shares, prices):
        return cash + (shares * prices).sum(-1)

    def portfolio_value(self) -> torch.Tensor:
        """Value (cash + shares at today's close) of every sub-env's current state, `[N]`
        float64."""
        cash, shares, day, _, _ = self._split_state(self.state)
        return self._value(cash, shares, self.prices[day.long()])

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        cash, shares, day, _, _ = self._split_state(state)
        d = day.long()
        pos = shares * self.prices[d]
        value = cash + pos.sum(-1)
        return torch.cat(
            [
                (cash / value)[:, None].to(torch.float32),
                (pos / value[:, None]).to(torch.float32),
                self.features[d],
            ],
            -1,
        )

    def _trade(self, cash, shares, prices, action):
        """Execute `action` [N, S] at `prices` [N, S]: sells, then buys scaled to the cash. Returns
        (cash, shares, traded value [N])."""
        c = self.transaction_cost
        a = action.to(torch.float64).clamp(-1.0, 1.0)
        value = self._value(cash, shares, prices)
        target = a * (self.max_trade * value)[:, None]  # signed trade values
        sell_shares = torch.minimum((-target).clamp(min=0) / prices, shares)
        sell_value = sell_shares * prices
        cash = cash + sell_value.sum(-1) * (1 - c)
        shares = shares - sell_shares
        buy_value = target.clamp(min=0)
        # cash the buys would need
        want = buy_value.sum(-1) * (1 + c)
        spend = torch.minimum(want, cash)
        scale = torch.where(want > 0, spend / want.clamp(min=1e-300), torch.zeros_like(want))
        buy_value = buy_value * scale[:, None]
        shares = shares + buy_value / prices
        cash = cash - spend  # >= 0: spend <= cash
        return cash, shares, sell_value.sum(-1) + buy_value.sum(-1)

    def _transition(self, state: torch.Tensor, action: torch.Tensor):
        cash, shares, day, start, end = self._split_state(state)
        d = day.long()
        prices = self.prices[d]
        v0 = self._value(cash, shares, prices)
        cash, shares, _ = self._trade(cash, shares, prices, action)
        day = day + 1
        v1 = self._value(cash, shares, self.prices[day.long()])
        reward = self.reward_scale * torch.log(v1 / v0)
        next_state = torch.cat(
            [cash[:, None], shares, day[:, None], start[:, None], end[:, None]], -1
        )
        return next_state, reward, v1

    def step(self, actions):
        if self.validate_actions:
            actions = self._validate(actions)
        next_state, reward, value = self._transition(self.state, actions)
        self.elapsed += 1
        _, _, day, _, end = self._split_state(next_state)
        truncated = day >= end
        terminated = torch.zeros_like(truncated)
        final_obs = self._observe(next_state)
        fresh = self._sample_initial_state(self.num_envs)
        self.state = torch.where(truncated[:, None], fresh, next_state)
        self.elapsed = torch.where(truncated, torch.zeros_like(self.elapsed), self.elapsed)
        obs = self._observe(self.state)
        info = {"final_obs": final_obs, "_final_obs": truncated, "portfolio_value": value}
        return obs, reward.to(torch.float32), terminated, truncated, info

    def dates(self) -> np.ndarray:
        """The dates of the split (numpy datetime64)."""
        return self.data.dates[self.first_day : self.last_day + 1]


# ---------------------------------------------------------------------------------------------
# backtest
# ---------------------------------------------------------------------------------------------
METRICS = (
    ("cumulative_return", "cumulative return", "pct"),
    ("annual_return", "annual return (CAGR)", "pct"),
    ("annual_volatility", "annual volatility", "pct"),
    ("sharpe", "Sharpe ratio", "num"),
    ("max_drawdown", "max drawdown", "pct"),
    ("calmar", "Calmar ratio", "num"),
)


def performance(account_values, periods_per_year: int = 252) -> dict:
    """Backtest metrics of an account-value series v_0..v_n (one value per trading day).

    With daily simple returns r_t = v_t / v_{t-1} - 1 (t = 1..n):
      cumulative_return = v_n / v_0 - 1
      annual_return     = (v_n / v_0) ** (periods_per_year / n) - 1          (geometric, CAGR)
      annual_volatility = std(r, ddof=1) * sqrt(periods_per_year)
      sharpe            = mean(r) / std(r, ddof=1) * sqrt(periods_per_year)  (risk-free rate 0;
                          +-inf when the std is 0 and the mean is not, nan if both are 0)
      max_drawdown      = min_t (v_t / max_{s<=t} v_s - 1)                   (<= 0)
      calmar            = annual_return / |max_drawdown|
                          (inf / nan if no drawdown)
    """
    v = np.asarray(account_values, dtype=np.float64).ravel()
    if len(v) < 2 or not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise UserError("performance needs at least 2 positive, finite account values")
    n = len(v) - 1
    r = v[1:] / v[:-1] - 1
    growth = v[-1] / v[0]
    std = float(r.std(ddof=1)) if n > 1 else 0.0
    mean = float(r.mean())
    if std > 1e-12 * max(abs(mean), 1e-12):
        sharpe = mean / std * math.sqrt(periods_per_year)
    else:
        std = 0.0
        sharpe = math.copysign(math.inf, mean) if mean != 0 else math.nan
    annual = growth ** (periods_per_year / n) - 1
    mdd = float(np.min(v / np.maximum.accumulate(v) - 1))
    calmar = annual / abs(mdd) if mdd < 0 else (math.inf if annual > 0 else math.nan)
    return {
        "cumulative_return": float(growth - 1),
        "annual_return": float(annual),
        "annual_volatility": std * math.sqrt(periods_per_year),
        "sharpe": float(sharpe),
        "max_drawdown": mdd,
        "calmar": float(calmar),
    }


def buy_and_hold(
    prices, initial_cash: float = 1e6, transaction_cost: float = 0.001, split: str = "backtest"
) -> np.ndarray:
    """Account values of an equal-weight buy-and-hold portfolio over `prices` `[T, S]` (or a
    `StockData`, then over its `split`).

    The same convention as the env: v_0 = initial_cash (before trading); at the close of day 0 the
    cash is spent in equal parts on every stock, fees included (each stock gets
    initial_cash / S / (1 + cost) of shares); v_t = shares . p_t for t >= 1.
    """
    p = (
        prices.split_close(split)
        if isinstance(prices, StockData)
        else np.asarray(prices, dtype=np.float64)
    )
    if p.ndim == 1:
        p = p[:, None]
    shares = initial_cash / p.shape[1] / (1 + transaction_cost) / p[0]
    v = p @ shares
    v[0] = initial_cash
    return v


@torch.no_grad()
def backtest(policy, data: StockData | None = None, device="cpu", **env_kwargs) -> dict:
    """Run a deterministic `policy` (obs tensor [1, obs_dim] -> action tensor [1, S], e.g. a
    `common.policy.PolicyFn` from a file's `load_policy`) over the backtest split.

    Returns `dates` (numpy datetime64 [T]), `values` (account values [T], v_0 = initial cash, the
    env's convention), `buy_and_hold` (equal-weight baseline [T], same cash and fees) and `weights`
    ([T-1, 1 + S]: cash and position fractions after each day's observation, i.e. the obs' first
    1 + S entries).
    """
    env = StockTrading(num_envs=1, device=device, seed=0, split="backtest", data=data, **env_kwargs)
    obs_dim = env.single_observation_space.shape[0]
    expected = getattr(policy, "obs_shape", None)
    if expected is not None and tuple(expected) != (obs_dim,):
        raise UserError(
            f"the policy takes observations of shape {tuple(expected)} but this data gives "
            f"({obs_dim},) ({env.n_stocks} stocks): backtest on the data it was trained "
            f"on (STOCK_TRADING_CSV?)"
        )
    obs, _ = env.reset(seed=0)
    values = [env.portfolio_value()]
    weights = []
    for _ in range(env.last_day - env.first_day):
        weights.append(obs[:, : 1 + env.n_stocks])
        action = torch.as_tensor(policy(obs), device=env.device, dtype=torch.float32)
        obs, _, _, truncated, info = env.step(action.reshape(1, env.n_stocks))
        values.append(info["portfolio_value"])
    assert bool(truncated.all()), "backtest did not end on the split's last day"
    values = torch.cat(values).cpu().numpy()
    return {
        "dates": env.dates(),
        "values": values,
        "buy_and_hold": buy_and_hold(env.data, env.initial_cash, env.transaction_cost),
        "weights": torch.cat(weights).cpu().numpy(),
        "data": env.data,
    }


def _fmt(x: float, kind: str) -> str:
    if not math.isfinite(x):
        return str(x)
    return f"{100 * x:.1f}%" if kind == "pct" else f"{x:.2f}"


def report_markdown(rows: dict[str, dict], title: str | None = None) -> str:
    """A markdown table: one row per named metrics dict (from `performance`), the six metrics as
    columns."""
    head = "| | " + " | ".join(label for _, label, _ in METRICS) + " |"
    lines = ([f"{title}", ""] if title else []) + [head, "|---" + "|---:" * len(METRICS) + "|"]
    for name, m in rows.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(m[k], kind) for k, _, kind in METRICS) + " |")
    return "\n".join(lines) + "\n"


def plot_account_values(dates, series: dict[str, np.ndarray], path, title: str = "") -> None:
    """PNG of account values over the dates, one line per named series (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from common.checkpoint import atomic_write

    fig, ax = plt.subplots(figsize=(9, 4.5))
    x = np.asarray(dates).astype("datetime64[D]").astype(object)
    for name, v in series.items():
        ax.plot(
            x,
            v,
            label=name,
            lw=1.6 if "buy-and-hold" in name else 1.1,
            ls="--" if "buy-and-hold" in name else "-",
        )
    ax.set_ylabel("account value")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write(path, buf.getvalue())
