"""Atari through ale-py (envs/atari.py): the preprocessing the DQN family and PPO learn with (a lost
life ends an episode for learning, rewards clipped to their sign) and the game they are judged on
(`info["score"]`, `info["episode_over"]`: unclipped scores over all lives, which the run's episode
statistics and `common.evaluate` report)."""

import numpy as np
import pytest
import torch

import envs
from common.errors import UserError
from common.evaluate import evaluate
from common.wrappers import wrap_env

pytest.importorskip("ale_py", reason="pip install ale-py")


def _play(env, steps: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    n, k = env.num_envs, env.single_action_space.n
    for _ in range(steps):
        yield env.step(torch.as_tensor(rng.integers(0, k, n)))


def test_breakout_frames_rewards_lives_and_games():
    env = envs.make("ALE/Breakout-v5", num_envs=4, seed=0)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == torch.uint8 and obs.shape == (4, 4, 84, 84)
    assert env.single_observation_space.shape == (4, 84, 84) and env.single_action_space.n == 4
    lives = torch.full((4,), 5)
    lost = games = 0
    for obs, reward, terminated, truncated, info in _play(env, 1500):
        assert obs.shape == (4, 4, 84, 84) and reward.dtype == torch.float32
        # the training reward is the score's sign
        assert torch.equal(reward, info["score"].sign())
        over = info["episode_over"]
        # a life lost is a termination; so is a game's end, after which all lives are back
        fewer = (info["lives"] < lives) & ~over
        assert torch.equal(terminated & ~over, fewer), (lives, info["lives"], terminated)
        assert (terminated | truncated)[over].all() and (info["lives"][over] == 5).all()
        # where the game goes on the final frame is the frame it goes on from
        going = ~over
        assert torch.equal(info["final_obs"][going], obs[going])
        lost, games, lives = lost + int(fewer.sum()), games + int(over.sum()), info["lives"]
    assert lost > 0 and games > 0


def test_each_new_life_is_served_so_a_greedy_policy_never_stalls():
    """Breakout serves the ball on FIRE: at a game's start ale-py presses it, and at the start of
    each later life the env does (the agent's action replaced). An agent that never presses FIRE
    (always NOOP) then loses its five lives within a few hundred steps, where without the serve its
    second life would stand still until the 108,000-frame limit (a greedy evaluation's 27,000
    steps a game)."""
    env = envs.make("ALE/Breakout-v5", num_envs=2, seed=1)
    env.reset(seed=1)
    for step in range(1_000):
        *_, info = env.step(torch.zeros(2, dtype=torch.long))
        if info["episode_over"].any():
            break
    assert info["episode_over"].any(), f"no game ended in {step + 1} NOOP steps"


def test_episode_statistics_and_evaluation_count_whole_games_unclipped():
    """`EpisodeStatistics` (what a run logs as `return`) and `evaluate` (`eval_return`) sum the
    unclipped score over every life of a game; the training signal is clipped and per life."""
    env = wrap_env(envs.make("ALE/Breakout-v5", num_envs=2, seed=1))
    env.reset(seed=1)
    score = torch.zeros(2, dtype=torch.float64)
    games, per_life = [], 0
    for obs, reward, terminated, truncated, info in _play(env, 1500, seed=1):
        score += info["score"]
        over = info["_episode"]
        per_life += int((terminated & ~over).sum())
        for i in torch.nonzero(over).flatten().tolist():
            assert info["episode"]["r"][i] == score[i]  # the whole game's unclipped score
            games.append(float(score[i]))
            score[i] = 0
    assert games and per_life > len(games)

    fire_then_random = np.random.default_rng(0)

    def policy(obs):
        return torch.as_tensor(fire_then_random.integers(0, 4, len(obs)))

    result = evaluate(policy, "ALE/Breakout-v5", episodes=2, seed=3)
    # games of five lives: far longer than one life's episode
    assert result["eval_length"] > 100 and all(r >= 0 for r in result["returns"])


def test_atari_ids_and_bad_input_say_what_to_do():
    with pytest.raises(UserError, match="ALE/<Game>-v5"):
        envs.make("ALE/Breakout-v4", num_envs=1)
    with pytest.raises(UserError, match="no game"):
        envs.make("ALE/NoSuchGame-v5", num_envs=1)
    with pytest.raises(UserError, match="did you mean ALE/Breakout-v5"):
        envs.make("ALE/Breakot-v5", num_envs=1)
    # every game under the id gymnasium registers for it (ale_py.registration), TicTacToe3D's too
    from ale_py.registration import rom_id_to_name
    from ale_py.roms import get_all_rom_ids

    from envs.atari import ale_id, ale_rom

    for rom in get_all_rom_ids():
        assert ale_id(rom) == f"ALE/{rom_id_to_name(rom)}-v5" and ale_rom(ale_id(rom)) == rom
    env = envs.make("ALE/Pong-v5", num_envs=2)
    env.reset(seed=0)
    with pytest.raises(UserError, match=r"\[0, 6\)"):
        env.step(torch.tensor([0, 6]))


@pytest.mark.slow  # two training runs on 84x84 frames
def test_dqn_and_ppo_train_on_atari_frames(tmp_path):
    """One short run each on Pong's 84x84 frames: the Nature CNN encoder, uint8 replay and rollout
    storage, and a checkpoint whose policy takes the env's uint8 frames."""
    from algos import dqn, ppo_vec

    for module, over in (
        (dqn, dict(num_envs=2, total_steps=200, learning_starts=100, batch_size=8,
                   buffer_size=500, gradient_steps=1)),
        (ppo_vec, dict(num_envs=2, num_steps=16, num_minibatches=2, update_epochs=1,
                       total_steps=64)),
    ):  # fmt: skip
        out = str(tmp_path / module.ALGO)
        result = module.main(
            module.Args(env="ALE/Pong-v5", eval_every=0, eval_episodes=1, out_dir=out, **over)
        )
        policy = module.load_policy(result["checkpoint"])
        frame = np.zeros((2, 4, 84, 84), dtype=np.uint8)
        assert policy(frame).shape == (2,)
