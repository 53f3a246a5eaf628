"""bench/stats.py: the interquartile mean, stratified-bootstrap intervals, probability of
improvement, performance profiles and ratios, checked against their definitions (and scipy's
trimmed mean)."""

import sys

import numpy as np
import pytest
from scipy.stats import trim_mean

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import stats  # noqa: E402


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 10, 13, 25])
def test_iqm_is_scipys_trimmed_mean_of_a_quarter(n):
    x = np.random.default_rng(n).normal(size=n) * 10
    assert stats.iqm(x) == pytest.approx(trim_mean(x, 0.25), abs=1e-12)


def test_iqm_ignores_an_outlier_seed():
    assert stats.iqm([100.0] * 7 + [-5000.0]) == 100.0  # the mean is -537.5


def test_interval_holds_the_estimate_is_reproducible_and_narrows_with_runs():
    rng = np.random.default_rng(0)
    few = {"a": rng.normal(size=5), "b": rng.normal(size=5) + 1}
    point, lo, hi = stats.interval(few, seed=3)
    assert lo <= point <= hi and lo < hi
    assert stats.interval(few, seed=3) == (point, lo, hi)
    many = {"a": rng.normal(size=200), "b": rng.normal(size=200) + 1}
    _, lo2, hi2 = stats.interval(many, seed=3)
    assert hi2 - lo2 < (hi - lo) / 2
    assert stats.interval({"a": [3.0] * 4}) == (3.0, 3.0, 3.0)


def test_the_bootstrap_resamples_within_each_task():
    # a task with one run is in every replicate exactly once: the tasks are strata, not resampled
    scores = {"lone": [5.0], "many": [1.0, 2.0, 3.0, 4.0]}
    assert stats.interval(scores, statistic=lambda x: float((x == 5.0).sum())) == (1.0, 1.0, 1.0)
    assert stats.interval(scores, statistic=lambda x: float(len(x))) == (5.0, 5.0, 5.0)


def test_probability_of_improvement():
    a = {"t": [1.0, 2.0, 3.0]}
    assert stats.probability_of_improvement(a, a)[0] == 0.5  # ties count half
    assert stats.probability_of_improvement({"t": [5.0, 6.0]}, a) == (1.0, 1.0, 1.0)
    assert stats.probability_of_improvement(a, {"t": [5.0, 6.0]})[0] == 0.0
    # averaged over tasks: better on one, worse on the other
    x, y = {"t": [2.0], "u": [0.0]}, {"t": [1.0], "u": [1.0]}
    assert stats.probability_of_improvement(x, y)[0] == 0.5
    # 2 of 4 pairs above, 1 tie: (2 + 0.5) / 4
    assert stats.probability_of_improvement({"t": [1.0, 3.0]}, {"t": [1.0, 2.0]})[0] == 0.625
    with pytest.raises(ValueError, match="share no task"):
        stats.probability_of_improvement({"t": [1.0]}, {"u": [1.0]})


def test_profile_is_the_fraction_of_runs_above_each_threshold():
    scores = {"t": [1.0, 2.0, 3.0, 4.0]}
    frac, lo, hi = stats.profile(scores, [0.0, 1.5, 3.5, 9.0])
    np.testing.assert_allclose(frac, [1.0, 0.75, 0.25, 0.0])
    assert (lo <= frac).all() and (frac <= hi).all()
    assert (np.diff(stats.profile(scores, np.linspace(0, 5, 11))[0]) <= 0).all()


def test_ratio_of_statistics():
    y = {"t": [1.0, 2.0, 3.0, 4.0, 5.0]}
    x = {"t": [2 * v for v in y["t"]]}
    point, lo, hi = stats.ratio(x, y)
    assert point == pytest.approx(2.0) and lo <= 2.0 <= hi
    assert stats.ratio(x, y, statistic=np.median)[0] == pytest.approx(2.0)


def test_the_batched_bootstrap_is_the_replicate_by_replicate_definition():
    """The replicates are drawn in one call and their statistics computed a matrix at once; the
    numbers are those of drawing each replicate in turn (every argument's tasks in order, one
    `integers(0, n, n)` a task) and computing the statistic on each: equal to the last bit."""

    def one_at_a_time(statistic, *scores, reps, seed):
        rng, out = np.random.default_rng(seed), []
        for _ in range(reps):
            drawn = [
                {t: np.asarray(v, float)[rng.integers(0, len(v), len(v))] for t, v in s.items()}
                for s in scores
            ]
            out.append(statistic(*drawn))
        tail = 100 * (1 - 0.95) / 2  # (2.5000000000000018, as stats computes it)
        return np.percentile(out, tail), np.percentile(out, 100 - tail)

    def pooled(s):
        return np.concatenate(list(s.values()))

    def improvement(x, y):
        return np.mean([((x[t][:, None] > y[t]) + 0.5 * (x[t][:, None] == y[t])).mean() for t in x])

    rng = np.random.default_rng(4)
    for case in range(20):
        tasks = [f"t{i}" for i in range(1 + case % 10)]  # up to 10: np.mean's pairwise sums too
        x, y = ({t: rng.normal(size=rng.integers(1, 12)) for t in tasks} for _ in "xy")
        reps, seed = 50 + case, case
        for statistic in (stats.iqm, np.median, np.max):
            want = one_at_a_time(lambda s: statistic(pooled(s)), x, reps=reps, seed=seed)
            assert stats.interval(x, statistic, reps=reps, seed=seed)[1:] == want
            want = one_at_a_time(
                lambda a, b: statistic(pooled(a)) / statistic(pooled(b)), x, y, reps=reps, seed=seed
            )
            assert stats.ratio(x, y, statistic, reps=reps, seed=seed)[1:] == want
        want = one_at_a_time(improvement, x, y, reps=reps, seed=seed)
        assert stats.probability_of_improvement(x, y, reps=reps, seed=seed)[1:] == want
