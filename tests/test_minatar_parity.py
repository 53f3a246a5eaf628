"""envs/minatar.py against the `minatar` package (1.0.15), step for step.

Each sub-env of our batch is shadowed by one `minatar.Environment` whose random number generator is
replaced by `Draws`, which serves the uniforms our env drew for that sub-env (`last_uniforms`,
`last_reset_uniforms`) in the form the package asks for them (`rand()`, `randint(k)`, arrays), each
call site its own column. Same actions and same draws must give the same observation, reward and
termination on every step, and the same fresh start after every episode's end.
"""

from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np
import pytest
import torch

import envs
from envs.minatar import GAMES

minatar = pytest.importorskip("minatar", reason="pip install --no-deps minatar==1.0.15")

# which columns of our uniforms each call of the package's RNG reads, by the calling function:
# one entry per call in the order the function makes them (step columns after the sticky one)
CALLS = {
    "Breakout": {"reset": [0]},
    "Asterix": {"_spawn_entity": [0, 1, 2]},
    "Freeway": {"_randomize_cars": [slice(0, 8), slice(8, 16)]},
    "Seaquest": {"_spawn_enemy": [0, 1, 2], "_spawn_diver": [3, 4]},
    "SpaceInvaders": {},
}
PACKAGE_NAME = {"Breakout": "breakout", "Asterix": "asterix", "Freeway": "freeway",
                "Seaquest": "seaquest", "SpaceInvaders": "space_invaders"}  # fmt: skip


class Draws:
    """The package's `numpy.random.RandomState`, serving one sub-env's uniforms of our env."""

    def __init__(self, game: str):
        self.calls_of = CALLS[game]

    def load(self, u: torch.Tensor, step: bool):
        self.u, self.step, self.count = u.numpy().astype(np.float32), step, defaultdict(int)

    def _next(self):
        fn = sys._getframe(2).f_code.co_name  # who called rand / randint
        if fn == "act":  # Environment.act: the sticky-action draw
            assert self.step
            return self.u[0]
        k = self.count[fn]
        self.count[fn] += 1
        return self.u[int(self.step) :][self.calls_of[fn][k]]

    def rand(self, *size):
        u = self._next()
        return u.astype(np.float64) if size else float(u)

    def randint(self, low, high=None, size=None):
        if high is None:
            low, high = 0, low
        u = self._next()
        k = low + np.floor(u * np.float32(high - low)).astype(np.int64)  # float32, as ours
        return k if size is not None else int(k)


def _state(ref) -> np.ndarray:
    return ref.state().transpose(2, 0, 1).astype(np.uint8)


def _run(game: str, seed: int, num_envs: int, steps: int, pick=None, setup=None):
    """Both sides, `steps` steps of `num_envs` sub-envs with uniformly random actions (or
    `pick(rng, obs)`'s), from the reset state (changed on both sides by `setup(env, refs)`, if
    given); returns counters of what the run went through, for the coverage checks."""
    env = GAMES[game](num_envs=num_envs, seed=seed, minimal_actions=False, max_episode_steps=None)
    obs, _ = env.reset(seed=seed)
    refs, draws = [], []
    for i in range(num_envs):
        ref = minatar.Environment(PACKAGE_NAME[game], sticky_action_prob=0.1)
        d = Draws(game)
        ref.random = ref.env.random = d
        d.load(env.last_reset_uniforms[i], step=False)
        ref.reset()
        np.testing.assert_array_equal(obs[i].numpy(), _state(ref), err_msg=f"{game} reset {i}")
        refs.append(ref)
        draws.append(d)
    if setup is not None:
        setup(env, refs)
        obs = env._observe(env.state)
        for i, ref in enumerate(refs):
            np.testing.assert_array_equal(obs[i].numpy(), _state(ref), err_msg=f"{game} set-up")
    rng = np.random.default_rng(seed)
    seen = defaultdict(int)
    for t in range(steps):
        actions = rng.integers(0, 6, num_envs) if pick is None else pick(rng, obs.numpy())
        obs, reward, terminated, truncated, info = env.step(torch.as_tensor(actions))
        assert not truncated.any()
        final, now = info["final_obs"].numpy(), obs.numpy()
        reward, terminated = reward.tolist(), terminated.tolist()
        for i, ref in enumerate(refs):
            draws[i].load(env.last_uniforms[i], step=True)
            r, done = ref.act(int(actions[i]))
            where = f"{game} seed {seed} env {i} step {t}"
            assert (reward[i], terminated[i]) == (r, done), where
            np.testing.assert_array_equal(final[i], _state(ref), err_msg=where)
            seen["reward"] += r
            seen["ramp"] = max(seen["ramp"], ref.env.difficulty_ramp() or 0)
            if done:
                seen["episodes"] += 1
                draws[i].load(env.last_reset_uniforms[i], step=False)
                ref.reset()
                np.testing.assert_array_equal(now[i], _state(ref), err_msg=where)
    return seen


def _freeway_up(rng, obs):
    """Mostly up: crossings (rewards, new car speeds) within one 2,500-step episode."""
    return rng.choice(6, len(obs), p=[0.1, 0.05, 0.7, 0.05, 0.05, 0.05])


def _seaquest_diver(rng, obs):
    """Down, fire, sideways and up, with few idle steps: this reaches divers and the surface."""
    return rng.choice(6, len(obs), p=[0.05, 0.2, 0.2, 0.2, 0.15, 0.2])


def _last_alien(env, refs):
    """One alien left, above the cannon: the first shots clear the wave (a new, faster one)."""
    aliens = np.zeros((10, 10))
    aliens[3, 5] = 1
    rows = (aliens.astype(np.int64) << np.arange(10)).sum(1)  # ours: a bit mask a row
    env.layout.unpack(env.state)["aliens"][:] = torch.as_tensor(rows)
    for ref in refs:
        ref.env.alien_map = aliens.copy()


def _fire_first(rng, obs):
    return np.where(rng.random(len(obs)) < 0.5, 5, rng.integers(0, 6, len(obs)))


QUICK = {"Freeway": (_freeway_up, 4, 2600)}


@pytest.mark.parametrize("game", sorted(GAMES))
def test_minatar_matches_the_package(game):
    pick, n, steps = QUICK.get(game, (None, 8, 600))
    seen = _run(game, 0, num_envs=n, steps=steps, pick=pick)
    assert seen["episodes"] > 0 and seen["reward"] > 0, seen


@pytest.mark.slow
@pytest.mark.parametrize("game", sorted(GAMES))
@pytest.mark.parametrize("seed", [1])
def test_minatar_matches_the_package_on_more_seeds(game, seed):
    pick, n, steps = QUICK.get(game, (None, 16, 1500))
    seen = _run(game, seed, num_envs=n, steps=steps, pick=pick)
    assert seen["episodes"] > 0 and seen["reward"] > 0, seen


@pytest.mark.slow
@pytest.mark.parametrize(
    "game,pick,setup",
    [
        ("Seaquest", _seaquest_diver, None),
        ("SpaceInvaders", _fire_first, _last_alien),
        ("Asterix", None, None),
    ],
)
def test_minatar_matches_the_package_as_difficulty_ramps(game, pick, setup):
    seen = _run(game, 7, num_envs=16, steps=2500, pick=pick, setup=setup)
    assert seen["ramp"] >= 1, seen


@pytest.mark.parametrize("env_id,n_actions", [("MinAtar/Breakout-v1", 3), ("Breakout-MinAtar", 3),
                                              ("MinAtar/Seaquest-v0", 6),
                                              ("MinAtar/SpaceInvaders-v1", 4)])  # fmt: skip
def test_minatar_ids_make_contract_envs(env_id, n_actions):
    from envs.base import check_env

    env = envs.make(env_id, num_envs=8, seed=0)
    check_env(env, 8, torch.device("cpu"))
    assert env.single_action_space.n == n_actions
    obs, _ = env.reset(seed=0)
    assert obs.dtype == torch.uint8 and obs.shape[1:] == env.single_observation_space.shape


def test_minatar_resume_is_exact():
    a = envs.make("MinAtar/Seaquest-v1", num_envs=32, seed=3)
    a.reset(seed=3)
    acts = torch.randint(0, 6, (200, 32), generator=torch.Generator().manual_seed(0))
    for t in range(100):
        a.step(acts[t])
    sd = a.state_dict()
    b = envs.make("MinAtar/Seaquest-v1", num_envs=32, seed=99)
    b.load_state_dict(sd)
    for t in range(100, 200):
        oa, ra, ta, _, _ = a.step(acts[t])
        ob, rb, tb, _, _ = b.step(acts[t])
        assert torch.equal(oa, ob) and torch.equal(ra, rb) and torch.equal(ta, tb)


def test_minatar_truncates_at_max_episode_steps():
    env = envs.make("MinAtar/Freeway-v1", num_envs=4, seed=0, max_episode_steps=50)
    env.reset(seed=0)
    for t in range(50):
        _, _, terminated, truncated, _ = env.step(torch.zeros(4, dtype=torch.long))
    assert truncated.all() and not terminated.any()
