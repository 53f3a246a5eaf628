"""The Stable-Baselines3 side of bench/peers.py. Runs in bench/.venv-peers (SB3 is not a project
dependency) and prints one JSON line with the result; bench/peers.py starts it, one run at a time.

    bench/.venv-peers/bin/python bench/peers_sb3.py ppo --seed 1 --eval-every 2048 --threshold 475
    bench/.venv-peers/bin/python bench/peers_sb3.py sac --seed 1 --eval-every 1000 --threshold -200

Hyper-parameters: RL Baselines3 Zoo (hyperparams/ppo.yml and dqn.yml CartPole-v1, sac.yml and
td3.yml Pendulum-v1).
Evaluation: the loop of common/evaluate.py's `gym_rollouts`, copied here (this venv has not the
project's dependencies): one `gymnasium.make(env_id)`, episode k reset with seed `seed + 10000 + k`,
deterministic `model.predict`.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN, PPO, SAC, TD3
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import NormalActionNoise

# RL Zoo hyper-parameters (n_envs: make_vec_env; lin_X: linear schedule from X to 0 over
# n_timesteps)
ZOO = {
    "ppo": dict(
        env="CartPole-v1",
        n_envs=8,
        n_timesteps=100_000,
        kwargs=dict(
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate="lin_0.001",
            clip_range="lin_0.2",
        ),
    ),
    "dqn": dict(
        env="CartPole-v1",
        n_envs=1,
        n_timesteps=50_000,
        kwargs=dict(
            learning_rate=2.3e-3,
            batch_size=64,
            buffer_size=100_000,
            learning_starts=1000,
            gamma=0.99,
            target_update_interval=10,
            train_freq=256,
            gradient_steps=128,
            exploration_fraction=0.16,
            exploration_final_eps=0.04,
            policy_kwargs=dict(net_arch=[256, 256]),
        ),
    ),
    "sac": dict(env="Pendulum-v1", n_envs=1, n_timesteps=20_000, kwargs=dict(learning_rate=1e-3)),
    "td3": dict(
        env="Pendulum-v1",
        n_envs=1,
        n_timesteps=20_000,
        kwargs=dict(
            gamma=0.98,
            buffer_size=200_000,
            learning_starts=10_000,
            noise_type="normal",
            noise_std=0.1,
            gradient_steps=-1,
            train_freq=(1, "episode"),
            learning_rate=1e-3,
            policy_kwargs=dict(net_arch=[400, 300]),
        ),
    ),
}


def gym_rollouts(policy, env_id: str, episodes: int, seed: int) -> dict:
    """common/evaluate.py's gym_rollouts (without video)."""
    env = gym.make(env_id)
    returns, lengths = [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done, total, n = False, 0.0, 0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total += float(reward)
            n += 1
            done = terminated or truncated
        returns.append(total)
        lengths.append(n)
    env.close()
    r = np.asarray(returns)
    return {
        "eval_return": float(r.mean()),
        "eval_return_std": float(r.std()),
        "eval_length": float(np.mean(lengths)),
    }


def linear(x0: float):
    return lambda progress_remaining: progress_remaining * x0


class Clock(BaseCallback):
    """Training clock (from the start of `learn`) and, with `eval_every`, a deterministic evaluation
    after every update that completes `eval_every` more env steps; with `threshold`, training stops
    at the first evaluation at or above it."""

    def __init__(self, env_id, seed, episodes, eval_every=0, threshold=None):
        super().__init__()
        self.env_id, self.seed, self.episodes = env_id, seed, episodes
        self.eval_every, self.threshold = eval_every, threshold
        self.evals, self.last_eval, self.stop, self.t0, self.t_end = [], 0, False, None, None

    def _on_training_start(self):
        self.t0 = time.perf_counter()

    def evaluate(self):
        t = time.perf_counter()
        r = gym_rollouts(
            lambda o: self.model.predict(o, deterministic=True)[0],
            self.env_id,
            self.episodes,
            self.seed + 10_000,
        )
        now = time.perf_counter()
        self.evals.append(
            dict(
                step=int(self.num_timesteps),
                seconds=now - self.t0,
                eval_seconds=now - t,
                eval_return=r["eval_return"],
            )
        )
        self.last_eval = self.num_timesteps
        if self.threshold is not None and r["eval_return"] >= self.threshold:
            self.stop = True

    def _on_rollout_start(self):  # right after an update (PPO: after `train()`)
        if (
            self.eval_every
            and not self.stop
            and self.num_timesteps - self.last_eval >= self.eval_every
        ):
            self.evaluate()

    def _on_step(self):
        return not self.stop

    def _on_training_end(self):
        self.t_end = time.perf_counter()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("algo", choices=list(ZOO))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--steps", type=int, default=None, help="training steps (default: the zoo's n_timesteps)"
    )
    p.add_argument("--eval-every", type=int, default=0, help="evaluate every this many env steps")
    p.add_argument("--threshold", type=float, default=None, help="the task's solve threshold")
    p.add_argument(
        "--stop-at-hit", action="store_true", help="stop at the first evaluation >= --threshold"
    )
    p.add_argument("--eval-episodes", type=int, default=10)
    a = p.parse_args()
    torch.set_num_threads(1)
    z = ZOO[a.algo]
    kwargs = dict(z["kwargs"])
    for k in ("learning_rate", "clip_range"):
        if isinstance(kwargs.get(k), str) and kwargs[k].startswith("lin_"):
            kwargs[k] = linear(float(kwargs[k][4:]))
    if "noise_type" in kwargs:
        kwargs.pop("noise_type")
        std = kwargs.pop("noise_std")
        kwargs["action_noise"] = NormalActionNoise(mean=np.zeros(1), sigma=std * np.ones(1))
    t_start = time.perf_counter()
    env = make_vec_env(z["env"], n_envs=z["n_envs"], seed=a.seed)
    cls = {"ppo": PPO, "dqn": DQN, "sac": SAC, "td3": TD3}[a.algo]
    model = cls("MlpPolicy", env, seed=a.seed, device="cpu", verbose=0, **kwargs)
    clock = Clock(
        z["env"], a.seed, a.eval_episodes, a.eval_every, a.threshold if a.stop_at_hit else None
    )
    model.learn(total_timesteps=a.steps or z["n_timesteps"], callback=clock)
    train_seconds = clock.t_end - clock.t0
    if a.eval_every and not clock.stop:
        clock.evaluate()  # the final policy (evaluations run at the start of a rollout)
    out = dict(
        side="sb3",
        algo=a.algo,
        env=z["env"],
        seed=a.seed,
        steps=int(model.num_timesteps),
        train_seconds=train_seconds,
        evals=clock.evals,
        mode="first-hit" if a.stop_at_hit else "full",
    )
    if a.threshold is not None:
        hit = next((e for e in clock.evals if e["eval_return"] >= a.threshold), None)
        out.update(
            reached=hit is not None,
            seconds=hit["seconds"] if hit else None,
            step=hit["step"] if hit else None,
        )
    else:  # final evaluation, outside the training clock
        r = gym_rollouts(
            lambda o: model.predict(o, deterministic=True)[0],
            z["env"],
            a.eval_episodes,
            a.seed + 10_000,
        )
        out.update(seconds=train_seconds, final=r)
    out["process_seconds"] = time.perf_counter() - t_start
    out["versions"] = dict(
        torch=torch.__version__,
        sb3=__import__("stable_baselines3").__version__,
        gymnasium=gym.__version__,
        threads=torch.get_num_threads(),
    )
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
