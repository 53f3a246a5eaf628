"""The statistics the benchmark reports over seeds, as Agarwal et al. 2021 ("Deep Reinforcement
Learning at the Edge of the Statistical Precipice") define them and their `rliable` package computes
them; written here with numpy alone (rliable is not a project dependency, and these are a few lines
each).

Scores come as `{task: runs}`: one number per run (a seed's final evaluation, its time to a stable
solve, its env-steps per second), runs of a task in any order, tasks of any run count.

* `iqm`: the interquartile mean, the mean of the middle 50% of all runs' scores (the lowest and the
  highest quarter cut, as `scipy.stats.trim_mean(x, 0.25)`): robust to an outlier seed, less noisy
  than the median.
* `interval`: a point estimate and its 95% confidence interval by the stratified bootstrap: each
  replicate draws every task's runs again with replacement (the tasks themselves stay: strata), and
  the interval is the percentiles of the statistic over replicates.
* `probability_of_improvement`: P(X > Y), the chance that a run of X scores above a run of Y on the
  same task (ties count half: the Mann-Whitney U statistic over all pairs), averaged over tasks.
* `profile`: the performance profile, the fraction of runs scoring above each threshold tau.
* `ratio`: the ratio of two statistics (ours over the peer's speed), with its interval.

Tasks with different score scales are normalized before they are pooled (the report divides by a
task's solve threshold or the peer's score); these functions take the numbers as given.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

Scores = dict  # {task: sequence of per-run scores}


def iqm(x) -> float:
    """The mean of the middle half of `x` (floor(n / 4) values cut from each end)."""
    x = np.sort(np.asarray(x, dtype=np.float64).ravel())
    cut = int(0.25 * len(x))
    return float(x[cut : len(x) - cut].mean())


def _pooled(scores: Scores) -> np.ndarray:
    return np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in scores.values()])


def _resampled(reps: int, seed: int, *scores: Scores) -> list[dict]:
    """`reps` stratified-bootstrap replicates of each argument, `{task: [reps, runs]}`: row i is
    every task's runs drawn again, with replacement, for replicate i. The statistics are computed
    on these matrices a whole array at once, not one replicate at a time in Python."""
    runs = [{t: np.asarray(v, dtype=np.float64).ravel() for t, v in s.items()} for s in scores]
    sizes = [len(r) for s in runs for r in s.values()]
    # one draw for all: with array bounds numpy draws the same numbers, in the same order, as one
    # `integers(0, n, n)` call per task and replicate would (tests/test_bench_stats.py holds it)
    bounds = np.tile(np.repeat(sizes, sizes), reps)
    index = np.random.default_rng(seed).integers(0, bounds).reshape(reps, sum(sizes))
    out, start = [], 0
    for s in runs:
        out.append({})
        for t, r in s.items():
            out[-1][t] = r[index[:, start : start + len(r)]]
            start += len(r)
    return out


def _rows(statistic: Callable[[np.ndarray], float], m: np.ndarray) -> np.ndarray:
    """`statistic` of each row of `m` (the IQM and the median over a whole array at once)."""
    if statistic is iqm:
        m = np.sort(m, axis=1)
        cut = int(0.25 * m.shape[1])
        return m[:, cut : m.shape[1] - cut].mean(axis=1)
    if statistic is np.median:
        return np.median(m, axis=1)
    return np.array([statistic(row) for row in m], dtype=np.float64)


def _pooled_rows(replicates: dict) -> np.ndarray:
    """Each replicate's runs pooled over tasks (in task order): `[reps, all runs]`."""
    return np.concatenate(list(replicates.values()), axis=1)


def interval(
    scores: Scores,
    statistic: Callable[[np.ndarray], float] = iqm,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(point estimate, low, high): `statistic` of every run pooled over tasks, and its percentile
    interval over stratified-bootstrap replicates."""

    reps_ = _rows(statistic, _pooled_rows(*_resampled(reps, seed, scores)))
    tail = 100 * (1 - confidence) / 2
    return (
        statistic(_pooled(scores)),
        float(np.percentile(reps_, tail)),
        float(np.percentile(reps_, 100 - tail)),
    )


def _improvement(x: Scores, y: Scores) -> float:
    shared = [t for t in x if t in y]
    if not shared:
        raise ValueError("probability of improvement: the two sides share no task")
    values = []
    for t in shared:
        a = np.asarray(x[t], dtype=np.float64).ravel()[:, None]
        b = np.asarray(y[t], dtype=np.float64).ravel()[None, :]
        values.append(float(((a > b) + 0.5 * (a == b)).mean()))
    return float(np.mean(values))


def probability_of_improvement(
    x: Scores, y: Scores, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """(P(X > Y), low, high) over the tasks both sides ran, with a stratified-bootstrap interval
    (each side's runs drawn again within each task)."""
    point = _improvement(x, y)  # (refuses two sides without a shared task)
    rx, ry = _resampled(reps, seed, x, y)
    shared = [t for t in x if t in y]
    # per task the pairs' mean over each replicate (exact: halves summed), then the tasks' mean
    per_task = [
        ((a > b) + 0.5 * (a == b)).mean(axis=(1, 2))
        for a, b in ((rx[t][:, :, None], ry[t][:, None, :]) for t in shared)
    ]
    reps_ = np.stack(per_task, axis=1).mean(axis=1)  # each row as np.mean of its tasks
    tail = 100 * (1 - confidence) / 2
    return (
        point,
        float(np.percentile(reps_, tail)),
        float(np.percentile(reps_, 100 - tail)),
    )


def profile(
    scores: Scores, taus, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The run-score distribution: for each tau, the fraction of runs (pooled over tasks) scoring
    above it, and its interval (arrays over `taus`)."""
    taus = np.asarray(taus, dtype=np.float64)
    pooled = _pooled_rows(*_resampled(reps, seed, scores))  # [reps, runs]
    reps_ = (pooled[:, :, None] > taus[None, None, :]).mean(1)
    tail = 100 * (1 - confidence) / 2
    return (
        (_pooled(scores)[:, None] > taus[None, :]).mean(0),
        np.percentile(reps_, tail, 0),
        np.percentile(reps_, 100 - tail, 0),
    )


def ratio(
    x: Scores,
    y: Scores,
    statistic: Callable[[np.ndarray], float] = iqm,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(statistic(x) / statistic(y), low, high): e.g. ours over the peer's env-steps per second,
    with a stratified-bootstrap interval (each side resampled on its own)."""

    rx, ry = _resampled(reps, seed, x, y)
    reps_ = _rows(statistic, _pooled_rows(rx)) / _rows(statistic, _pooled_rows(ry))
    tail = 100 * (1 - confidence) / 2
    return (
        statistic(_pooled(x)) / statistic(_pooled(y)),
        float(np.percentile(reps_, tail)),
        float(np.percentile(reps_, 100 - tail)),
    )
