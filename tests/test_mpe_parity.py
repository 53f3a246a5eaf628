"""The batched MPE tasks (`envs/mpe.py`) against mpe2's parallel envs, and the multi-agent
vec-env contract (`common/ma_vec_env.py`).

Parity: our env runs in float64 with W worlds next to W mpe2 parallel envs whose entity states
are overwritten with ours; both get the same (seeded, sticky, partly out-of-bound) actions for
more than two 25-step episodes. Every step compares the physical state of every entity, every
agent's reward, observation (unpadded part; padding must be zero), the global state against
mpe2's `state()`, and the termination/truncation flags. Where our env autoresets a world, its
mpe2 env is reset and re-synced to our fresh start state.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import envs
from common.evaluate import ma_evaluate
from common.ma_vec_env import MAEpisodeStatistics
from envs.mpe import SimpleSpread, SimpleTag

mpe2 = pytest.importorskip("mpe2")
from mpe2 import simple_spread_v3, simple_tag_v3  # noqa: E402

W = 6  # worlds per parity run
STEPS = 60  # two full 25-step episodes and part of a third
TOL = 1e-12
REFERENCE = {SimpleSpread: simple_spread_v3, SimpleTag: simple_tag_v3}

CASES = [
    ("spread-discrete", SimpleSpread, {}),
    ("spread-continuous", SimpleSpread, {"continuous_actions": True}),
    ("spread-discrete-success", SimpleSpread, {"terminate_on_success": True}),
    ("tag-discrete", SimpleTag, {}),
    ("tag-continuous", SimpleTag, {"continuous_actions": True}),
    ("tag-discrete-success", SimpleTag, {"terminate_on_success": True}),
]


@pytest.fixture(autouse=True)
def _quiet():
    from pettingzoo.utils.env_logger import EnvLogger

    EnvLogger.suppress_output()  # mpe2's clipping warning on out-of-bound continuous actions
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    EnvLogger.unsuppress_output()


def _reference(cls, kw):
    env = REFERENCE[cls].parallel_env(**kw)
    env.reset(seed=0)
    return env


def _sync(ref, ours_row: np.ndarray) -> None:
    """Overwrite the mpe2 world's entity states with one world of ours ([E, 4])."""
    world = ref.unwrapped.world
    for e, ent in zip(ours_row, world.agents + world.landmarks):
        ent.state.p_pos = np.array(e[:2], dtype=np.float64)
        ent.state.p_vel = np.array(e[2:], dtype=np.float64)


def _ref_state(ref) -> np.ndarray:
    world = ref.unwrapped.world
    return np.array(
        [np.concatenate([e.state.p_pos, e.state.p_vel]) for e in world.agents + world.landmarks]
    )


def _start_states(ours, rng: np.random.Generator) -> np.ndarray:
    """Half fresh starts, half chosen to reach contacts, speed caps, boundary penalties, success."""
    s = ours.state.numpy().copy()
    A = ours.n_agents
    s[3:, :A, 2:] = rng.uniform(-1.5, 1.5, (W - 3, A, 2))  # moving agents (speed caps)
    s[3, :A, :2] = s[3, 0, :2] + rng.uniform(-0.15, 0.15, (A, 2))  # a cluster: contact forces
    if isinstance(ours, SimpleSpread):
        s[4, :A, :2] = s[4, A:, :2]  # every agent on a landmark: success at once
        s[4, :A, 2:] = 0.0
    else:
        Ad = ours.num_adversaries
        s[4, 0, :2] = s[4, Ad, :2] + 0.05  # an adversary on the prey
        s[5, Ad, :2] = (0.95, -1.05)  # prey near/over the boundary, moving out
        s[5, Ad, 2:] = (1.0, -1.0)
        s[5, 1, :2] = s[5, A, :2] + 0.2  # an adversary against an obstacle
    return s


def _actions(ours, rng: np.random.Generator, prev: np.ndarray | None) -> np.ndarray:
    shape = (W, ours.n_agents) if ours.discrete else (W, ours.n_agents, 5)
    # some out of [0, 1]
    new = rng.integers(0, 5, shape) if ours.discrete else rng.uniform(-0.3, 1.3, shape)
    if prev is None:
        return new
    keep = rng.random((W, ours.n_agents)) < 0.7  # sticky: builds up speed
    return np.where(keep if ours.discrete else keep[..., None], prev, new)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name,cls,kw", CASES, ids=[c[0] for c in CASES])
def test_parity_with_mpe2(name, cls, kw, seed):
    rng = np.random.default_rng(seed)
    ours = cls(num_envs=W, dtype=torch.float64, seed=seed, **kw)
    ours.reset(seed=seed)
    ours.state = torch.tensor(_start_states(ours, rng))
    refs = [_reference(cls, kw) for _ in range(W)]
    for r, row in zip(refs, ours.state.numpy()):
        _sync(r, row)
    names = refs[0].possible_agents
    assert names == ours.agent_names
    A, dims = ours.n_agents, ours.obs_dims

    a, n_done, n_term, n_contact = None, 0, 0, 0
    for t in range(STEPS):
        a = _actions(ours, rng, a)
        a_t = torch.as_tensor(a)
        # float64, before the float32 cast
        ns, r64, term64 = ours._transition(ours.state.clone(), a_t)
        obs, rew, term, trunc, info = ours.step(a_t)

        g_state = np.zeros_like(ns.numpy())
        g_obs = np.zeros((W, A, max(dims)), np.float32)
        g_rew, g_term, g_trunc = np.zeros((W, A)), np.zeros(W, bool), np.zeros(W, bool)
        g_global = np.zeros((W, ours.state_dim), np.float32)
        for i, ref in enumerate(refs):
            acts = {
                n: (int(a[i, k]) if ours.discrete else a[i, k].astype(np.float64))
                for k, n in enumerate(names)
            }
            o, r, te, tr, _ = ref.step(acts)
            g_state[i] = _ref_state(ref)
            for k, n in enumerate(names):
                g_obs[i, k, : dims[k]] = o[n]
                g_rew[i, k] = r[n]
            assert len(set(te.values())) == 1 and len(set(tr.values())) == 1  # shared flags
            g_term[i], g_trunc[i] = te[names[0]], tr[names[0]]
            g_global[i] = ref.state()

        msg = f"{name} seed {seed} step {t}"
        np.testing.assert_allclose(ns.numpy(), g_state, rtol=0, atol=TOL, err_msg=msg)
        np.testing.assert_allclose(r64.numpy(), g_rew, rtol=0, atol=TOL, err_msg=msg)
        assert rew.dtype == torch.float32
        np.testing.assert_allclose(rew.numpy(), g_rew, rtol=1e-6, atol=1e-5, err_msg=msg)
        np.testing.assert_array_equal(term.numpy(), g_term, err_msg=msg)
        np.testing.assert_array_equal(trunc.numpy(), g_trunc, err_msg=msg)
        # observations / global state: the true last ones, and obs == final_obs where nothing
        # finished
        done = (term | trunc).numpy()
        np.testing.assert_array_equal(info["_final_obs"].numpy(), done)
        np.testing.assert_allclose(info["final_obs"].numpy(), g_obs, rtol=0, atol=1e-6, err_msg=msg)
        np.testing.assert_allclose(
            info["final_state"].numpy(), g_global, rtol=0, atol=1e-6, err_msg=msg
        )
        torch.testing.assert_close(info["final_obs"], ours._observe(ns), rtol=0, atol=0)
        np.testing.assert_array_equal(obs.numpy()[~done], info["final_obs"].numpy()[~done])
        np.testing.assert_array_equal(
            info["state"].numpy()[~done], info["final_state"].numpy()[~done]
        )
        torch.testing.assert_close(obs, ours._observe(ours.state), rtol=0, atol=0)
        torch.testing.assert_close(
            info["state"], ours._global_state(ours.state, obs), rtol=0, atol=0
        )
        assert (ours.elapsed.numpy()[done] == 0).all()
        n_contact += (
            int((g_rew != 0).any(-1).sum())
            if cls is SimpleTag
            else int((g_rew != g_rew[:, :1]).any(-1).sum())
        )
        for i in np.flatnonzero(done):
            refs[i].reset(seed=int(rng.integers(1 << 30)))
            _sync(refs[i], ours.state[i].numpy())
        n_done += int(done.sum())
        n_term += int(g_term.sum())

    assert n_done >= 2 * W, f"{name}: worlds did not finish their episodes"
    assert n_contact > 0, f"{name}: no collision / boundary rewards were exercised"
    if kw.get("terminate_on_success"):
        assert n_term > 0, f"{name}: the parity run never reached a termination"


@pytest.mark.parametrize(
    "cls,kw",
    [
        (SimpleSpread, {}),
        (SimpleTag, {}),
        (SimpleSpread, {"continuous_actions": True}),
        (SimpleSpread, {"N": 4, "local_ratio": 0.2}),
        (SimpleTag, {"num_good": 2, "num_adversaries": 2, "num_obstacles": 3}),
    ],
)
def test_spaces_match_mpe2(cls, kw):
    ref = _reference(cls, kw)
    ours = cls(num_envs=2, **kw)
    assert ours.agent_names == ref.possible_agents
    assert ours.obs_dims == [ref.observation_space(n).shape[0] for n in ref.possible_agents]
    assert ours.single_observation_space.shape == (max(ours.obs_dims),)
    assert ours.single_observation_space.dtype == np.float32
    assert ours.state_dim == ref.state_space.shape[0] == sum(ours.obs_dims)
    for n in ref.possible_agents:
        assert ref.action_space(n) == ours.single_action_space
    assert ours.n_actions == (None if ours.continuous_actions else 5)
    assert ours.discrete == (not ours.continuous_actions)
    assert ours.max_episode_steps == 25


def test_shapes_and_avail_actions():
    N = 5
    for env_id, A, obs_dim, state_dim in (("simple_spread", 3, 18, 54), ("simple_tag", 4, 16, 62)):
        env = envs.make(env_id, num_envs=N, seed=0)
        obs, info = env.reset(seed=0)
        assert obs.shape == (N, A, obs_dim) and obs.dtype == torch.float32
        assert info["state"].shape == (N, state_dim) and info["state"].dtype == torch.float32
        assert (
            info["avail_actions"].shape == (N, A, 5) and info["avail_actions"].dtype == torch.bool
        )
        assert info["avail_actions"].all()
        obs, rew, term, trunc, info = env.step(torch.zeros(N, A, dtype=torch.long))
        assert rew.shape == (N, A) and rew.dtype == torch.float32
        assert term.shape == trunc.shape == (N,) and term.dtype == trunc.dtype == torch.bool
        assert set(info) == {"state", "avail_actions", "final_obs", "final_state", "_final_obs"}
        assert info["final_obs"].shape == (N, A, obs_dim) and info["final_state"].shape == (
            N,
            state_dim,
        )
        assert info["avail_actions"].shape == (N, A, 5) and info["avail_actions"].all()
    env = envs.make("simple_spread", num_envs=N, continuous_actions=True)
    obs, info = env.reset(seed=0)
    assert "avail_actions" not in info and env.n_actions is None and not env.discrete
    _, _, _, _, info = env.step(torch.full((N, 3, 5), 0.5))
    assert set(info) == {"state", "final_obs", "final_state", "_final_obs"}
    # the prey's shorter observation is zero-padded; the state concatenates the unpadded ones
    tag = envs.make("simple_tag", num_envs=N, seed=0)
    obs, info = tag.reset()
    assert tag.obs_dims == [16, 16, 16, 14]
    assert (obs[:, 3, 14:] == 0).all()
    torch.testing.assert_close(
        info["state"], torch.cat([obs[:, i, :d] for i, d in enumerate(tag.obs_dims)], -1)
    )


@pytest.mark.parametrize(
    "env_id,kw",
    [("simple_spread", {}), ("simple_spread", {"continuous_actions": True}), ("simple_tag", {})],
)
def test_autoreset_at_max_cycles(env_id, kw):
    env = envs.make(env_id, num_envs=4, seed=3, **kw)
    obs, info = env.reset(seed=3)
    A = env.n_agents
    a = torch.zeros(4, A, dtype=torch.long) if env.discrete else torch.zeros(4, A, 5)
    a[:, :] = 2 if env.discrete else torch.tensor([0.0, 0.0, 1.0, 0.0, 0.3])  # keep moving right
    for t in range(1, 26):
        ns, _, _ = env._transition(env.state.clone(), a)
        obs, rew, term, trunc, info = env.step(a)
        assert not term.any()
        if t < 25:
            assert not trunc.any() and not info["_final_obs"].any()
            torch.testing.assert_close(obs, info["final_obs"], rtol=0, atol=0)
    assert trunc.all() and info["_final_obs"].all()
    torch.testing.assert_close(info["final_obs"], env._observe(ns), rtol=0, atol=0)
    torch.testing.assert_close(
        info["final_state"], env._global_state(ns, info["final_obs"]), rtol=0, atol=0
    )
    torch.testing.assert_close(obs, env._observe(env.state), rtol=0, atol=0)
    torch.testing.assert_close(info["state"], env._global_state(env.state, obs), rtol=0, atol=0)
    assert not torch.equal(obs, info["final_obs"])
    assert (env.state[:, :A, 2:] == 0).all(), "obs after truncation is not a fresh start"
    assert (ns[:, :A, 2:] != 0).any()
    assert (env.elapsed == 0).all()
    _, _, _, trunc, info = env.step(a)  # the next step continues the new episode
    assert not trunc.any() and not info["_final_obs"].any()


def test_terminated_world_resets_alone():
    env = SimpleSpread(num_envs=3, seed=0, terminate_on_success=True)
    env.reset(seed=0)
    s = env.state.clone()
    s[1, :3, :2] = s[1, 3:, :2]  # world 1: every agent on a landmark
    env.state = s
    obs, rew, term, trunc, info = env.step(torch.zeros(3, 3, dtype=torch.long))
    assert term.tolist() == [False, True, False] and not trunc.any()
    assert info["_final_obs"].tolist() == [False, True, False]
    assert not torch.equal(obs[1], info["final_obs"][1]) and torch.equal(
        obs[[0, 2]], info["final_obs"][[0, 2]]
    )
    assert env.elapsed.tolist() == [1, 0, 1]


@pytest.mark.parametrize("env_id", ["simple_spread", "simple_tag"])
def test_initial_state_distribution(env_id):
    env = envs.make(env_id, num_envs=4096, seed=0)
    env.reset(seed=0)
    A = env.n_agents
    lm_hi = 1.0 if env_id == "simple_spread" else 0.9
    for block, hi in ((env.state[:, :A, :2], 1.0), (env.state[:, A:, :2], lm_hi)):
        assert block.abs().max() <= hi and block.abs().max() > 0.99 * hi
        assert abs(float(block.mean())) < 0.02
        assert abs(float(block.std()) - hi / math.sqrt(3)) < 0.01  # uniform on [-hi, hi]
    assert (env.state[..., 2:] == 0).all()


def _check_raises(env, actions, exc, *needles):
    with pytest.raises(exc) as e:
        env.step(actions)
    for needle in needles:
        assert needle in str(e.value), str(e.value)


def test_bad_actions():
    N = 4
    d = envs.make("simple_spread", num_envs=N, seed=0)
    d.reset()
    _check_raises(d, np.zeros((N, 3), np.int64), TypeError, "torch.as_tensor")
    _check_raises(
        d, torch.zeros(N, dtype=torch.long), ValueError, "expects shape (4, 3)", "3 agents"
    )
    _check_raises(d, torch.zeros(N, 3, 5, dtype=torch.long), ValueError, "expects shape (4, 3)")
    _check_raises(d, torch.zeros(N, 3), TypeError, "integer tensor", "argmax")
    _check_raises(d, torch.zeros(N, 3, dtype=torch.bool), TypeError, "integer tensor")
    _check_raises(d, torch.full((N, 3), 5), ValueError, "[0, 5)")
    _check_raises(d, torch.full((N, 3), -1), ValueError, "[0, 5)")
    _check_raises(
        d, torch.zeros(N, 3, dtype=torch.long, device="meta"), ValueError, "actions.to(env.device)"
    )
    c = envs.make("simple_spread", num_envs=N, seed=0, continuous_actions=True)
    c.reset()
    _check_raises(c, torch.zeros(N, 3, dtype=torch.long), TypeError, "floating-point")
    _check_raises(c, torch.zeros(N, 3), ValueError, "expects shape (4, 3, 5)")
    _check_raises(c, torch.full((N, 3, 5), float("nan")), ValueError, "finite")
    c.step(torch.full((N, 3, 5), 7.0))  # out of [0, 1]: clipped, as mpe2 does
    c.step(torch.zeros(N, 3, 5, dtype=torch.float64))  # any float dtype is fine
    d.step(torch.zeros(N, 3, dtype=torch.int32))  # any integer dtype is fine
    d.raise_deferred_errors()
    with pytest.raises(ValueError, match="num_envs"):
        envs.make("simple_tag", num_envs=0)
    with pytest.raises(ValueError, match="simple_spread takes no option 'render_mode'"):
        envs.make("simple_spread", num_envs=2, render_mode="human")


def test_continuous_clipping_matches_bounds():
    env = SimpleSpread(num_envs=2, seed=0, continuous_actions=True)
    env.reset(seed=0)
    sd = env.state_dict()
    out = env.step(torch.tensor([[-1.0, 3.0, 9.0, -5.0, 2.0]]).expand(2, 3, 5).contiguous())
    env.load_state_dict(sd)
    ref = env.step(torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0]]).expand(2, 3, 5).contiguous())
    for x, y in zip(out[:4], ref[:4]):
        assert torch.equal(x, y)


@pytest.mark.parametrize(
    "env_id,kw", [("simple_spread", {}), ("simple_tag", {"continuous_actions": True})]
)
def test_state_dict_round_trip(env_id, kw):
    env = MAEpisodeStatistics(envs.make(env_id, num_envs=8, seed=1, **kw))
    env.reset(seed=1)
    gen = torch.Generator().manual_seed(0)

    def act():
        if env.discrete:
            return torch.randint(0, 5, (8, env.n_agents), generator=gen)
        return torch.rand(8, env.n_agents, 5, generator=gen)

    for _ in range(17):
        env.step(act())
    sd = env.state_dict()
    acts = [act() for _ in range(20)]  # crosses the step-25 autoreset: the RNG state matters
    first = [env.step(a) for a in acts]
    stats = env.pop()
    env.load_state_dict(sd)
    second = [env.step(a) for a in acts]
    for (o1, r1, te1, tr1, i1), (o2, r2, te2, tr2, i2) in zip(first, second):
        assert (
            torch.equal(o1, o2)
            and torch.equal(r1, r2)
            and torch.equal(te1, te2)
            and torch.equal(tr1, tr2)
        )
        for k in ("state", "final_obs", "final_state", "_final_obs"):
            assert torch.equal(i1[k], i2[k])
        assert torch.equal(i1["episode"]["r"], i2["episode"]["r"])
    assert env.pop() == stats and stats["episodes"] == 8
    with pytest.raises(ValueError, match="num-envs"):
        envs.make(env_id, num_envs=4, **kw).load_state_dict(sd["inner"])


def test_episode_statistics_and_evaluate():
    env = MAEpisodeStatistics(envs.make("simple_tag", num_envs=16, seed=2))
    env.reset(seed=2)
    assert math.isnan(env.pop()["return"])
    a = torch.zeros(16, 4, dtype=torch.long)
    total = torch.zeros(16, dtype=torch.float64)
    for _ in range(25):
        _, rew, _, _, info = env.step(a)
        total += rew.double().mean(-1)
    assert info["_episode"].all() and (info["episode"]["l"] == 25).all()
    torch.testing.assert_close(info["episode"]["r"].double(), total, rtol=1e-6, atol=1e-4)
    stats = env.pop()
    assert stats["episodes"] == 16 and stats["length"] == 25
    assert abs(stats["return"] - float(total.mean())) < 1e-4
    assert math.isnan(env.pop()["return"])

    seen = {}

    def policy(obs, info):
        seen["shapes"] = (tuple(obs.shape), tuple(info["state"].shape))
        return torch.zeros(obs.shape[:2], dtype=torch.long)

    out = ma_evaluate(policy, "simple_tag", episodes=16, seed=2)
    assert seen["shapes"] == ((16, 4, 16), (16, 62))
    assert out["eval_length"] == 25 and len(out["returns"]) == 16
    # same seed, same starts
    np.testing.assert_allclose(out["returns"], total.numpy(), rtol=1e-6, atol=1e-4)
    out = ma_evaluate(
        lambda o, i: torch.full((*o.shape[:2], 5), 0.5),
        "simple_spread",
        episodes=3,
        continuous_actions=True,
    )
    assert out["eval_length"] == 25 and out["eval_return"] < 0


def test_make_ids_and_suggestions():
    for env_id, cls in (
        ("simple_spread", SimpleSpread),
        ("simple_spread_v3", SimpleSpread),
        ("simple_tag", SimpleTag),
        ("simple_tag_v3", SimpleTag),
    ):
        env = envs.make(env_id, num_envs=2, seed=0, vectorization_mode="sync")
        assert isinstance(env, cls)
    with pytest.raises(ValueError, match="simple_spread"):
        envs.make("simple_sprad")
    with pytest.raises(ValueError, match="simple_tag"):
        envs.make("simple_tags_v3")
