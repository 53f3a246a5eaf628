"""MAPPO (algos/mappo.py) on the discrete simple_spread: it learns (fixed seed, deterministic eval
against the uniform-random policy), its critic is centralized, a run is deterministic, and the
command line works. Exact resume (shared and per-agent actors): the SIGKILL test of
tests/test_faults.py."""

import pytest
import torch
from conftest import MAPPO_TINY, checkpoint_params

from algos import mappo
from common.evaluate import ma_evaluate

# Learning budget (fixed seed 1; 75 s alone on one CPU thread of an Intel host, 122-132 s on an AMD
# EPYC one, more when the other xdist worker shares the two cores; `update_epochs` 5 took ~41% less
# but gained 8.6-9.1 over random on seeds 1-3 instead of 9.7-10.9). Measured on the 40 evaluation
# worlds (eval seed 10_001, mean over agents summed over the 25 steps): uniform-random policy -26.0
# here (-26.3, std 7.5, over 1000 worlds; doing nothing: -24.0); this run -15.7 at 400k steps (-18.1
# with a 300k budget; -12.3 with 600k, ~105 s); a hand-written controller that assigns agents to
# landmarks and steers to them: -7.6. MARGIN is half the gain measured at 600k (14 return units):
# about 6 standard errors of a 40-world mean above random, and well above doing nothing.
SPREAD = dict(
    env="simple_spread",
    seed=1,
    num_envs=64,
    num_steps=25,
    num_minibatches=4,
    update_epochs=10,
    hidden=(128, 128),
    total_steps=400_000,
    eval_every=0,
    save_every=0,
    eval_episodes=40,
    quiet=True,
)
MARGIN = 7.0
TINY = MAPPO_TINY


def _random_return(episodes: int, seed: int) -> float:
    g = torch.Generator().manual_seed(0)

    def uniform(obs, info):
        return torch.randint(0, 5, obs.shape[:2], generator=g)

    return ma_evaluate(uniform, "simple_spread", episodes, seed=seed)["eval_return"]


@pytest.mark.slow
def test_learns_simple_spread(tmp_path):
    # the same worlds mappo's final evaluation runs on (ma_evaluate with seed + 10_000): a paired
    # comparison
    random_return = _random_return(SPREAD["eval_episodes"], SPREAD["seed"] + 10_000)
    result = mappo.main(mappo.Args(out_dir=str(tmp_path), **SPREAD))
    print("random", random_return, "trained", result)
    assert result["eval_return"] >= random_return + MARGIN, (result["eval_return"], random_return)


def test_critic_sees_the_global_state():
    import envs

    env = envs.make("simple_spread", num_envs=6, seed=3)
    obs, info = env.reset(seed=3)
    agent = mappo.Agent(
        env.single_observation_space.shape[0], env.state_dim, env.n_agents, env.n_actions
    )
    first = agent.critic[0]
    assert first.in_features == env.state_dim  # per-agent heads: the state alone, no agent id
    assert agent.critic[-1].out_features == env.n_agents
    state = info["state"]
    v = agent.value(state)
    assert v.shape == (6, env.n_agents)
    other_state = state + torch.randn_like(state)  # what only the critic sees changes ...
    v2 = agent.value(other_state)
    assert (v2 - v).abs().min() > 0
    # ... while everything the actors see is the same: their logits do not move
    logp, _, _ = agent.evaluate_actions(
        obs, info["avail_actions"], torch.zeros(6, env.n_agents, dtype=torch.long), state
    )
    logp2, _, v3 = agent.evaluate_actions(
        obs, info["avail_actions"], torch.zeros(6, env.n_agents, dtype=torch.long), other_state
    )
    assert torch.equal(logp, logp2) and torch.equal(v3, v2)
    # and the actor of an agent depends on that agent's observation only
    obs2 = obs.clone()
    obs2[:, 0] += 1.0
    changed = (agent.logits(obs2) - agent.logits(obs)).abs().amax(-1)
    assert (changed[:, 0] > 0).all() and torch.equal(
        changed[:, 1:], torch.zeros_like(changed[:, 1:])
    )


@pytest.mark.parametrize("share_actor", [True, False], ids=["shared-actor", "per-agent-actors"])
def test_actor_variants(share_actor):
    torch.manual_seed(0)
    agent = mappo.Agent(18, 54, 3, 5, hidden=(16, 16), share_actor=share_actor)
    obs = torch.randn(4, 3, 18)
    full = agent.logits(obs)
    assert full.shape == (4, 3, 5)
    if not share_actor:  # member i is agent i's own network
        for i in range(3):
            assert torch.allclose(full[:, i], agent.actor.member(i)(obs[:, i]), atol=1e-6)
    # the same observation gives different logits to different agents (id one-hot / own network)
    same = obs[:, :1].expand(4, 3, 18)
    out = agent.logits(same)
    assert not torch.allclose(out[:, 0], out[:, 1])


@pytest.mark.parametrize("share_actor", [True, False], ids=["shared-actor", "per-agent-actors"])
def test_same_seed_same_result_and_deployed_policy(share_actor, tmp_path):
    kw = dict(TINY, share_actor=share_actor)
    full = mappo.main(mappo.Args(out_dir=str(tmp_path / "full"), **kw))
    a = checkpoint_params(full["checkpoint"])
    # same seed, same result; another seed, another result
    again = mappo.main(mappo.Args(out_dir=str(tmp_path / "again"), **kw))
    c = checkpoint_params(again["checkpoint"])
    assert all(torch.equal(a[k], c[k]) for k in a)
    other = mappo.main(mappo.Args(out_dir=str(tmp_path / "other"), **{**kw, "seed": 7}))
    d = checkpoint_params(other["checkpoint"])
    assert not all(torch.equal(a[k], d[k]) for k in a)
    # the deployed policy is the one evaluated at the end of training
    deployed = ma_evaluate(
        mappo.load_policy(full["checkpoint"]),
        "simple_spread",
        kw["eval_episodes"],
        seed=kw.get("seed", 1) + 10_000,
    )
    assert deployed["eval_return"] == full["eval_return"]


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="not divisible by --num-minibatches 7"):
        mappo.main(
            mappo.Args(
                out_dir=str(tmp_path), num_envs=8, num_steps=5, num_minibatches=7, quiet=True
            )
        )
    with pytest.raises(ValueError, match="single-agent"):
        mappo.main(mappo.Args(out_dir=str(tmp_path), env="CartPole-v1", num_envs=8, quiet=True))
    assert not any(tmp_path.iterdir()), "a refused run must not leave a run directory behind"


def test_cli_help(cli_help):
    code, text = cli_help["mappo"]
    assert code in (0, None), (code, text)
    for flag in (
        "--env",
        "--num-envs",
        "--seed",
        "--device",
        "--total-steps",
        "--resume",
        "--compile",
        "--track",
        "--share-actor",
        "--no-share-actor",
        "--value-norm",
    ):
        assert flag in text
    assert mappo.__doc__.splitlines()[0].split()[0] in text
