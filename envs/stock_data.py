"""Daily stock data for `StockTrading-v0` (`envs/stock_trading.py`): loading, technical indicators
and the train/backtest split. numpy only (no pandas).

Datasets
--------
* `load_sp500()` (the default): skfolio's S&P 500 dataset, the daily adjusted closes of 20 S&P 500
  constituents from 1990-01-02 to 2022-12-28 (data from Yahoo Finance), shipped offline inside the
  `skfolio` package (BSD-3-Clause; skfolio says the data is for testing and examples only). We read
  the gzipped CSV directly, without importing skfolio. Default split: train 2010-01-01..2019-12-31,
  backtest 2020-01-01..2022-12-28.
* `load_csv(path)`: your own prices, either
  - long format (FinRL's layout): `date,tic,open,high,low,close,volume`, one row per date and
    ticker; column names are case-insensitive, `ticker` or `symbol` are accepted for `tic`, only
    `date`, `tic` and `close` are required (`high`/`low` are used by the CCI when present), or
  - wide format: `date,<TICKER1>,<TICKER2>,...`, one close per ticker and date.
  Only dates on which every ticker has a price are kept (the number dropped is reported in
  `StockData.dropped_dates` and as a warning). Default split of a CSV: after the indicator warm-up,
  the first 80% of the dates train and the last 20% backtest, unless `backtest_start` (a date) is
  given.

Indicators (`compute_indicators`), per stock and day t, using prices up to day t only (no
look-ahead), each scaled to O(1) and clipped to [-5, 5]:

  ===========  =================================================================================
  ret_1        log(c_t / c_{t-1}) * 50                                    (daily return)
  ret_5        log(c_t / c_{t-5}) * 20
  ret_20       log(c_t / c_{t-20}) * 5
  macd         (EMA12(c) - EMA26(c)) / c_t * 20                           (MACD normalized by price)
  rsi_14       (RSI14 - 50) / 50, Wilder's smoothing, in [-1, 1]
  cci_20       CCI20 / 100, typical price (h+l+c)/3 (close alone without high/low)
  close_sma30  (c_t / SMA30(c) - 1) * 10
  close_sma60  (c_t / SMA60(c) - 1) * 5
  vol_20       std of the last 20 daily log returns * sqrt(252) * 2       (annualized volatility)
  ===========  =================================================================================

Indicators are computed on the full series before splitting, so the backtest's first day has them
(from earlier prices only). The first `WARMUP` days of a dataset are never used as trading days.
"""

from __future__ import annotations

import csv
import functools
import gzip
import importlib.util
import io
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common.errors import UserError, MissingPackage, UserFileNotFoundError

__all__ = [
    "StockData",
    "load_sp500",
    "load_csv",
    "build",
    "compute_indicators",
    "FEATURE_NAMES",
    "WARMUP",
    "SP500_TRAIN",
    "SP500_BACKTEST",
]

FEATURE_NAMES = (
    "ret_1",
    "ret_5",
    "ret_20",
    "macd",
    "rsi_14",
    "cci_20",
    "close_sma30",
    "close_sma60",
    "vol_20",
)
WARMUP = 60  # days of history before the first trading day (the longest window, SMA60)
MIN_DATES = WARMUP + 20
SP500_TRAIN = ("2010-01-01", "2019-12-31")
SP500_BACKTEST = ("2020-01-01", "2022-12-28")
SKFOLIO_PIN = "skfolio==1.12.2"


@dataclass
class StockData:
    """Aligned daily prices of `len(tickers)` stocks and their indicators.

    `close` `[T, S]` float64 (positive), `high`/`low` `[T, S]` or None, `features` `[T, S, F]`
    float32 (`FEATURE_NAMES`), `dates` `[T]` numpy datetime64, sorted ascending. `splits` maps
    "train" and "backtest" to inclusive (first, last) day indices, both >= `WARMUP`.
    """

    dates: np.ndarray
    tickers: list[str]
    close: np.ndarray
    features: np.ndarray
    splits: dict[str, tuple[int, int]]
    high: np.ndarray | None = None
    low: np.ndarray | None = None
    source: str = ""
    dropped_dates: int = 0
    feature_names: tuple[str, ...] = field(default=FEATURE_NAMES)

    @property
    def n_stocks(self) -> int:
        return len(self.tickers)

    def split_range(self, split: str) -> tuple[int, int]:
        """Inclusive (first, last) day indices of `split` ("train" or "backtest")."""
        if split not in self.splits:
            raise UserError(f"unknown split {split!r}: choose one of {', '.join(self.splits)}")
        return self.splits[split]

    def split_dates(self, split: str) -> np.ndarray:
        lo, hi = self.split_range(split)
        return self.dates[lo : hi + 1]

    def split_close(self, split: str) -> np.ndarray:
        lo, hi = self.split_range(split)
        return self.close[lo : hi + 1]

    def describe(self) -> str:
        parts = [
            f"{self.source}: {self.n_stocks} stocks ({', '.join(self.tickers[:8])}"
            f"{', ...' if self.n_stocks > 8 else ''}), {len(self.dates)} dates "
            f"{self.dates[0]}..{self.dates[-1]}"
        ]
        for name, (lo, hi) in self.splits.items():
            parts.append(f"{name} {self.dates[lo]}..{self.dates[hi]} ({hi - lo + 1} days)")
        if self.dropped_dates:
            parts.append(f"{self.dropped_dates} dates dropped (not every ticker had a price)")
        return "; ".join(parts)


# ---------------------------------------------------------------------------------------------
# indicators
# ---------------------------------------------------------------------------------------------
def _ema(x: np.ndarray, alpha: float) -> np.ndarray:
    """Exponential moving average along axis 0, started at the first value (causal)."""
    out = np.empty_like(x)
    out[0] = x[0]
    for t in range(1, len(x)):
        out[t] = out[t - 1] + alpha * (x[t] - out[t - 1])
    return out


def _rolling_mean(x: np.ndarray, w: int) -> np.ndarray:
    """Mean of x[t-w+1 .. t] along axis 0; rows t < w-1 use the rows available (causal)."""
    c = np.cumsum(x, axis=0)
    out = np.empty_like(x)
    out[w:] = (c[w:] - c[:-w]) / w
    n = np.arange(1, min(w, len(x)) + 1).reshape((-1,) + (1,) * (x.ndim - 1))
    out[:w] = c[:w] / n
    return out


def _lagged(x: np.ndarray, k: int) -> np.ndarray:
    """x[t-k] (x[0] for t < k)."""
    out = np.empty_like(x)
    out[k:] = x[:-k]
    out[:k] = x[0]
    return out


def compute_indicators(
    close: np.ndarray, high: np.ndarray | None = None, low: np.ndarray | None = None
) -> np.ndarray:
    """Indicators `[T, S, len(FEATURE_NAMES)]` float32 of closes `[T, S]` (see the module
    docstring).

    Every value on day t depends on rows 0..t only. The first `WARMUP` rows are warm-up (partial
    windows) and are never traded on.
    """
    c = np.asarray(close, dtype=np.float64)
    logc = np.log(c)
    r = np.zeros_like(c)
    r[1:] = logc[1:] - logc[:-1]
    ret_1 = r * 50
    ret_5 = (logc - _lagged(logc, 5)) * 20
    ret_20 = (logc - _lagged(logc, 20)) * 5
    macd = (_ema(c, 2 / 13) - _ema(c, 2 / 27)) / c * 20
    gain, loss = _ema(np.maximum(r, 0), 1 / 14), _ema(np.maximum(-r, 0), 1 / 14)
    # RSI/100 = gain/(gain+loss)
    rsi = np.where(gain + loss > 0, gain / np.maximum(gain + loss, 1e-300), 0.5)
    rsi = (rsi - 0.5) * 2
    tp = (
        c
        if high is None or low is None
        else (np.asarray(high, np.float64) + np.asarray(low, np.float64) + c) / 3
    )
    sma_tp = _rolling_mean(tp, 20)
    # mean absolute deviation of the last 20 typical prices around today's 20-day mean
    pad = np.concatenate([np.repeat(tp[:1], 19, axis=0), tp], axis=0)
    windows = np.lib.stride_tricks.sliding_window_view(pad, 20, axis=0)  # [T, S, 20]: rows t-19..t
    mad = np.abs(windows - sma_tp[..., None]).mean(-1)
    cci = np.where(mad > 0, (tp - sma_tp) / (0.015 * np.maximum(mad, 1e-300)), 0.0) / 100
    sma30 = (c / _rolling_mean(c, 30) - 1) * 10
    sma60 = (c / _rolling_mean(c, 60) - 1) * 5
    m1, m2 = _rolling_mean(r, 20), _rolling_mean(r * r, 20)
    vol = np.sqrt(np.maximum(m2 - m1 * m1, 0) * 20 / 19) * np.sqrt(252) * 2
    feats = np.stack([ret_1, ret_5, ret_20, macd, rsi, cci, sma30, sma60, vol], axis=-1)
    return np.clip(np.nan_to_num(feats), -5, 5).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# building a dataset
# ---------------------------------------------------------------------------------------------
def _index_range(dates: np.ndarray, start: str | None, end: str | None) -> tuple[int, int]:
    lo = 0 if start is None else int(np.searchsorted(dates, np.datetime64(start), side="left"))
    hi = (
        len(dates) - 1
        if end is None
        else int(np.searchsorted(dates, np.datetime64(end), side="right")) - 1
    )
    return max(lo, WARMUP), hi


def build(
    dates,
    tickers,
    close,
    high=None,
    low=None,
    *,
    source="",
    dropped_dates=0,
    train: tuple[str | None, str | None] | None = None,
    backtest: tuple[str | None, str | None] | None = None,
    backtest_start: str | None = None,
) -> StockData:
    """A `StockData` from aligned arrays: checks the prices, computes the indicators, sets the
    split.

    The split: `train`/`backtest` date ranges (inclusive, None = open end) when given; else
    `backtest_start`: train before it, backtest from it; else 80% / 20% of the dates after `WARMUP`.
    """
    dates = (
        np.asarray(dates).astype("datetime64[D]")
        if np.asarray(dates).dtype.kind != "M"
        else np.asarray(dates)
    )
    close = np.asarray(close, dtype=np.float64)
    if close.ndim != 2 or close.shape[0] != len(dates) or close.shape[1] != len(tickers):
        raise UserError(
            f"close must be [dates, tickers] = [{len(dates)}, {len(tickers)}], got {close.shape}"
        )
    if len(dates) < MIN_DATES:
        raise UserError(
            f"{source or 'the data'} has {len(dates)} aligned dates; at least {MIN_DATES} "
            f"are needed ({WARMUP} days of indicator warm-up + 20 trading days): supply "
            f"a longer price history"
        )
    order = np.argsort(dates, kind="stable")
    if np.any(order != np.arange(len(dates))):
        dates, close = dates[order], close[order]
        high = None if high is None else np.asarray(high, np.float64)[order]
        low = None if low is None else np.asarray(low, np.float64)[order]
    if np.any(dates[1:] == dates[:-1]):
        d = dates[1:][dates[1:] == dates[:-1]][0]
        raise UserError(
            f"{source or 'the data'}: date {d} appears twice for the same ticker; "
            f"remove duplicate rows"
        )
    for name, arr in (("close", close), ("high", high), ("low", low)):
        if arr is None:
            continue
        bad = ~(np.isfinite(arr) & (arr > 0))
        if bad.any():
            t, s = np.argwhere(bad)[0]
            raise UserError(
                f"{source or 'the data'}: non-positive or missing {name} price {arr[t, s]} for "
                f"{tickers[s]} on {dates[t]}; prices must be > 0 (fix or drop those rows)"
            )
    features = compute_indicators(close, high, low)
    if train is not None or backtest is not None:
        splits = {
            "train": _index_range(dates, *(train or (None, None))),
            "backtest": _index_range(dates, *(backtest or (None, None))),
        }
    elif backtest_start is not None:
        b = int(np.searchsorted(dates, np.datetime64(backtest_start), side="left"))
        splits = {"train": (WARMUP, b - 1), "backtest": (max(b, WARMUP), len(dates) - 1)}
    else:
        b = WARMUP + int(0.8 * (len(dates) - WARMUP))
        splits = {"train": (WARMUP, b - 1), "backtest": (b, len(dates) - 1)}
    for name, (lo, hi) in splits.items():
        if hi - lo < 1:
            raise UserError(
                f"{source or 'the data'}: the {name} split has {max(hi - lo + 1, 0)} trading days "
                f"(dates {dates[0]}..{dates[-1]}, first {WARMUP} are indicator warm-up); "
                f"choose split dates inside the data"
            )
    return StockData(
        dates=dates,
        tickers=list(tickers),
        close=close,
        features=features,
        splits=splits,
        high=high,
        low=low,
        source=source,
        dropped_dates=dropped_dates,
    )


def skfolio_sp500_path() -> Path:
    """Path of skfolio's bundled `sp500_dataset.csv.gz`, found without importing skfolio."""
    spec = importlib.util.find_spec("skfolio")
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackage(
            f"StockTrading-v0's default data (skfolio's S&P 500 dataset) needs the skfolio "
            f"package: pip install {SKFOLIO_PIN} (or pass data=load_csv(...) / set "
            f"STOCK_TRADING_CSV to your own CSV)"
        )
    path = (
        Path(list(spec.submodule_search_locations)[0])
        / "datasets"
        / "data"
        / "sp500_dataset.csv.gz"
    )
    if not path.is_file():
        raise UserFileNotFoundError(
            f"{path} is missing from the installed skfolio; reinstall it: pip install {SKFOLIO_PIN}"
        )
    return path


@functools.lru_cache(maxsize=2)
def load_sp500(tickers: tuple[str, ...] | None = None) -> StockData:
    """skfolio's S&P 500 dataset (20 stocks, 1990-01-02..2022-12-28), split train 2010-2019 /
    backtest 2020-01-01..2022-12-28. `tickers` picks a subset (tuple, for caching)."""
    path = skfolio_sp500_path()
    with gzip.open(path, "rt", newline="") as f:
        text = f.read()
    data = _parse(
        text,
        str(path),
        tickers=list(tickers) if tickers else None,
        train=SP500_TRAIN,
        backtest=SP500_BACKTEST,
    )
    data.source = "skfolio S&P 500 dataset"
    return data


def load_csv(
    path: str | os.PathLike,
    tickers: list[str] | None = None,
    backtest_start: str | None = None,
    train: tuple[str | None, str | None] | None = None,
    backtest: tuple[str | None, str | None] | None = None,
) -> StockData:
    """Load your own daily prices from a CSV (long or wide format, see the module docstring).

    `tickers` keeps only those (in that order); the split is set as in `build`.
    """
    path = Path(path)
    if not path.is_file():
        raise UserFileNotFoundError(f"no CSV at {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as f:
        text = f.read()
    return _parse(
        text,
        str(path),
        tickers=tickers,
        backtest_start=backtest_start,
        train=train,
        backtest=backtest,
    )


_DATE_COLS = ("date", "datetime", "timestamp", "time", "day")
_TIC_COLS = ("tic", "ticker", "symbol")


def _float(s: str, where: str) -> float:
    if s is None or s.strip() == "":
        return np.nan
    try:
        return float(s)
    except ValueError:
        raise UserError(f"{where}: {s!r} is not a number") from None


def _parse(text: str, source: str, tickers=None, **split) -> StockData:
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if r and any(c.strip() for c in r)]
    if len(rows) < 2:
        raise UserError(
            f"{source}: empty CSV; expected a header `date,tic,close,...` (long) or "
            f"`date,<TICKER>,...` (wide)"
        )
    header = [h.strip() for h in rows[0]]
    lower = [h.lower() for h in header]
    tic_col = next((lower.index(c) for c in _TIC_COLS if c in lower), None)
    date_col = next((lower.index(c) for c in _DATE_COLS if c in lower), None)
    if date_col is None:
        raise UserError(
            f"{source}: no date column in the header {header}; name it `date` (long format "
            f"`date,tic,open,high,low,close,volume` or wide format `date,<TICKER1>,<TICKER2>,...`)"
        )
    if tic_col is not None or "close" in lower:  # long format
        missing = [
            n for n, c in (("tic", tic_col), ("close", "close" in lower or None)) if c is None
        ]
        if missing:
            raise UserError(
                f"{source}: long-format CSV is missing column(s) {', '.join(missing)} (header "
                f"{header}); the long format needs `date,tic,close` (plus optional "
                f"open,high,low,volume); `ticker` or `symbol` also work for `tic`"
            )
        return _parse_long(rows[1:], lower, date_col, tic_col, source, tickers, **split)
    return _parse_wide(rows[1:], header, date_col, source, tickers, **split)


def _select(all_tickers: list[str], tickers, source: str) -> list[int]:
    if tickers is None:
        return list(range(len(all_tickers)))
    unknown = [t for t in tickers if t not in all_tickers]
    if unknown:
        raise UserError(
            f"{source}: unknown ticker(s) {', '.join(unknown)}; the file has "
            f"{', '.join(all_tickers)}"
        )
    return [all_tickers.index(t) for t in tickers]


def _finish(source, dates, names, close, high, low, **split) -> StockData:
    ok = np.isfinite(close).all(1)
    for arr in (high, low):
        if arr is not None:
            ok &= np.isfinite(arr).all(1)
    dropped = int((~ok).sum())
    if dropped:
        warnings.warn(
            f"{source}: dropped {dropped} of {len(dates)} dates on which not "
            f"every ticker had a price",
            stacklevel=3,
        )
    return build(
        dates[ok],
        names,
        close[ok],
        None if high is None else high[ok],
        None if low is None else low[ok],
        source=source,
        dropped_dates=dropped,
        **split,
    )


def _parse_dates(strings, source) -> np.ndarray:
    out = []
    for s in strings:
        try:
            out.append(np.datetime64(s.strip()[:10], "D"))
        except ValueError:
            raise UserError(f"{source}: cannot read date {s!r}; use YYYY-MM-DD") from None
    return np.array(out, dtype="datetime64[D]")


def _parse_wide(rows, header, date_col, source, tickers, **split) -> StockData:
    names = [h for i, h in enumerate(header) if i != date_col]
    if not names:
        raise UserError(
            f"{source}: wide-format CSV has no ticker columns (header {header}); expected "
            f"`date,<TICKER1>,...`"
        )
    cols = [i for i in range(len(header)) if i != date_col]
    keep = _select(names, tickers, source)
    dates = _parse_dates([r[date_col] for r in rows], source)
    close = np.array(
        [
            [_float(r[cols[k]] if cols[k] < len(r) else "", f"{source} row {n + 2}") for k in keep]
            for n, r in enumerate(rows)
        ],
        dtype=np.float64,
    )
    return _finish(source, dates, [names[k] for k in keep], close, None, None, **split)


def _parse_long(rows, lower, date_col, tic_col, source, tickers, **split) -> StockData:
    ci = lower.index("close")
    hi_i = lower.index("high") if "high" in lower else None
    lo_i = lower.index("low") if "low" in lower else None
    use_hl = hi_i is not None and lo_i is not None
    all_tics = list(dict.fromkeys(r[tic_col].strip() for r in rows))
    keep = _select(all_tics, tickers, source)
    names = [all_tics[k] for k in keep]
    col = {t: j for j, t in enumerate(names)}
    date_strs = sorted({r[date_col].strip()[:10] for r in rows})
    dates = _parse_dates(date_strs, source)
    row_of = {d: i for i, d in enumerate(date_strs)}
    shape = (len(dates), len(names))
    close = np.full(shape, np.nan)
    high = np.full(shape, np.nan) if use_hl else None
    low = np.full(shape, np.nan) if use_hl else None
    for n, r in enumerate(rows):
        j = col.get(r[tic_col].strip())
        if j is None:
            continue
        i = row_of[r[date_col].strip()[:10]]
        where = f"{source} row {n + 2}"
        if not np.isnan(close[i, j]):
            raise UserError(
                f"{where}: a second row for {names[j]} on {date_strs[i]}; remove duplicate rows"
            )
        close[i, j] = _float(r[ci], where)
        if use_hl:
            high[i, j], low[i, j] = _float(r[hi_i], where), _float(r[lo_i], where)
    return _finish(source, dates, names, close, high, low, **split)


def from_env_var() -> StockData | None:
    """The dataset named by `STOCK_TRADING_CSV` (optionally split at
    `STOCK_TRADING_BACKTEST_START`), or None."""
    path = os.environ.get("STOCK_TRADING_CSV")
    if not path:
        return None
    if not Path(path).is_file():
        raise UserFileNotFoundError(
            f"STOCK_TRADING_CSV={path} is not a file: point it at a CSV of daily prices "
            f"(see envs/stock_data.py) or unset it to use the default S&P 500 data"
        )
    return _load_csv_cached(
        str(Path(path).resolve()),
        Path(path).stat().st_mtime,
        os.environ.get("STOCK_TRADING_BACKTEST_START") or None,
    )


@functools.lru_cache(maxsize=4)
def _load_csv_cached(path: str, mtime: float, backtest_start: str | None) -> StockData:
    return load_csv(path, backtest_start=backtest_start)
