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


def _resampled(scores: Scores, rng: np.random.Generator) -> Scores:
    """One stratified-bootstrap replicate: every task's runs drawn again, with replacement."""
    out = {}
    for task, runs in scores.items():
        runs = np.asarray(runs, dtype=np.float64).ravel()
        out[task] = runs[rng.integers(0, len(runs), len(runs))]
    return out


def bootstrap(
    statistic: Callable[..., float], *scores: Scores, reps: int = 2000, seed: int = 0
) -> np.ndarray:
    """`statistic(*scores)` over `reps` stratified-bootstrap replicates (each argument resampled on
    its own)."""
    rng = np.random.default_rng(seed)
    return np.array([statistic(*(_resampled(s, rng) for s in scores)) for _ in range(reps)])


def interval(
    scores: Scores,
    statistic: Callable[[np.ndarray], float] = iqm,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(point estimate, low, high): `statistic` of every run pooled over tasks, and its percentile
    interval over stratified-bootstrap replicates."""

    def pooled(s: Scores) -> float:
        return statistic(_pooled(s))

    reps_ = bootstrap(pooled, scores, reps=reps, seed=seed)
    tail = 100 * (1 - confidence) / 2
    return (
        pooled(scores),
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
    reps_ = bootstrap(_improvement, x, y, reps=reps, seed=seed)
    tail = 100 * (1 - confidence) / 2
    return (
        _improvement(x, y),
        float(np.percentile(reps_, tail)),
        float(np.percentile(reps_, 100 - tail)),
    )


def profile(
    scores: Scores, taus, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The run-score distribution: for each tau, the fraction of runs (pooled over tasks) scoring
    above it, and its interval (arrays over `taus`)."""
    taus = np.asarray(taus, dtype=np.float64)

    def above(s: Scores) -> np.ndarray:
        return (_pooled(s)[:, None] > taus[None, :]).mean(0)

    rng = np.random.default_rng(seed)
    reps_ = np.stack([above(_resampled(scores, rng)) for _ in range(reps)])
    tail = 100 * (1 - confidence) / 2
    return above(scores), np.percentile(reps_, tail, 0), np.percentile(reps_, 100 - tail, 0)


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

    def of(a: Scores, b: Scores) -> float:
        return statistic(_pooled(a)) / statistic(_pooled(b))

    reps_ = bootstrap(of, x, y, reps=reps, seed=seed)
    tail = 100 * (1 - confidence) / 2
    return of(x, y), float(np.percentile(reps_, tail)), float(np.percentile(reps_, 100 - tail))
