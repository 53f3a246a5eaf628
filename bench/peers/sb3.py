"""Stable-Baselines3 as a benchmark peer: one run with RL Baselines3 Zoo's settings for the task,
writing our metrics schema. It runs in its own venv (SB3 is not a project dependency; bench/run.py
builds `bench/.venv-sb3`) and imports nothing of ours.

    bench/.venv-sb3/bin/python bench/peers/sb3.py ppo --env CartPole-v1 --seed 11 \
        --total-steps 100000 --eval-every 2048 --out-dir runs

Writes `OUT_DIR/<env>__sb3_<algo>__s<seed>/metrics.jsonl`: a row per evaluation with `step`,
`seconds` (the clock from the start of `learn`, evaluations included), `eval_seconds`,
`eval_return`, `eval_return_std`, `eval_length`, as our files write them; `args.json` beside it has
the settings and versions. Evaluation: after the update that completes every `--eval-every` env
steps (a callback at the next rollout's start) and once on the final policy; deterministic
`predict` on one `gymnasium.make(env)`, episode k reset with seed `seed + 10000 + k` (the loop of
our tools/evaluate.py's `gym_rollouts`, copied: this venv has none of our code).

`--save-every N` writes a checkpoint every N env steps, at the end and on Ctrl-C (at the step it
stopped at; 0, the default: none): the model, the replay buffer of an off-policy algorithm and
VecNormalize's statistics, each file named by its step, then `checkpoint.json` naming them (written
last, atomically, so a run stopped mid-save resumes from the one before). `--resume
RUN_DIR/checkpoint.json` goes on from it for the rest of `--total-steps`: SB3's own `load` and
`load_replay_buffer`, the clock and the evaluations up to the checkpoint kept. Not bit-exact, as
SB3's own resume is not: the envs start fresh episodes (seeded `seed + step`), and the random
streams are not those of an unbroken run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN, PPO, SAC, TD3
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.vec_env import VecNormalize

# RL Zoo's hyperparams/<algo>.yml (commit 22e3ff24), by (algo, env): n_envs and normalize are
# the zoo's own keys; "lin_X" is its linear schedule from X to 0
_TD3_ZOO = dict(gamma=0.98, buffer_size=200_000, learning_starts=10_000, noise_std=0.1,
                gradient_steps=1, train_freq=1, learning_rate=1e-3,
                policy_kwargs=dict(net_arch=[400, 300]))  # fmt: skip
ZOO = {
    ("ppo", "CartPole-v1"): dict(n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
                                 n_epochs=20, ent_coef=0.0, learning_rate="lin_0.001",
                                 clip_range="lin_0.2"),
    ("dqn", "CartPole-v1"): dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
                                 learning_starts=1000, gamma=0.99, target_update_interval=10,
                                 train_freq=256, gradient_steps=128, exploration_fraction=0.16,
                                 exploration_final_eps=0.04,
                                 policy_kwargs=dict(net_arch=[256, 256])),
    ("sac", "Pendulum-v1"): dict(learning_rate=1e-3),
    ("td3", "Pendulum-v1"): dict(gamma=0.98, buffer_size=200_000, learning_starts=10_000,
                                 noise_std=0.1, gradient_steps=-1, train_freq=(1, "episode"),
                                 learning_rate=1e-3, policy_kwargs=dict(net_arch=[400, 300])),
    ("ppo", "LunarLanderContinuous-v3"): dict(n_envs=16, n_steps=1024, batch_size=64,
                                              gae_lambda=0.98, gamma=0.999, n_epochs=4,
                                              ent_coef=0.01),
    ("ppo", "BipedalWalker-v3"): dict(normalize=True, n_envs=32, n_steps=2048, batch_size=64,
                                      gae_lambda=0.95, gamma=0.999, n_epochs=10, ent_coef=0.0,
                                      learning_rate=3e-4, clip_range=0.18),
    ("sac", "LunarLanderContinuous-v3"): dict(batch_size=256, learning_rate="lin_7.3e-4",
                                              buffer_size=1_000_000, ent_coef="auto", gamma=0.99,
                                              tau=0.01, train_freq=1, gradient_steps=1,
                                              learning_starts=10_000,
                                              policy_kwargs=dict(net_arch=[400, 300])),
    ("sac", "BipedalWalker-v3"): dict(learning_rate=7.3e-4, buffer_size=300_000, batch_size=256,
                                      ent_coef="auto", gamma=0.98, tau=0.02, train_freq=64,
                                      gradient_steps=64, learning_starts=10_000, use_sde=True,
                                      policy_kwargs=dict(log_std_init=-3, net_arch=[400, 300])),
    ("td3", "LunarLanderContinuous-v3"): _TD3_ZOO,
    ("td3", "BipedalWalker-v3"): _TD3_ZOO,
}  # fmt: skip
ALGOS = {"ppo": PPO, "dqn": DQN, "sac": SAC, "td3": TD3}


def gym_rollouts(policy, env_id: str, episodes: int, seed: int) -> dict:
    env = gym.make(env_id)
    returns, lengths = [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done, total, n = False, 0.0, 0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total, n, done = total + float(reward), n + 1, terminated or truncated
        returns.append(total)
        lengths.append(n)
    env.close()
    r = np.asarray(returns)
    return dict(eval_return=float(r.mean()), eval_return_std=float(r.std()),
                eval_length=float(np.mean(lengths)))  # fmt: skip


class Evaluations(BaseCallback):
    """The clock from the start of `learn`, and an evaluation after every update that completes
    `every` more env steps, each a row of metrics.jsonl."""

    def __init__(self, a, path: Path, norm: VecNormalize | None, state: dict | None = None):
        super().__init__()
        self.a, self.path, self.norm, self.t0 = a, path, norm, None
        state = state or dict(step=0, seconds=0.0, last_eval=0)
        self.last, self.saved, self.offset = state["last_eval"], state["step"], state["seconds"]

    def _on_training_start(self):  # resumed: the clock goes on from the checkpoint's
        self.t0 = time.perf_counter() - self.offset

    def evaluate(self):
        t = time.perf_counter()
        scale = self.norm.normalize_obs if self.norm is not None else (lambda o: o)
        act = lambda o: self.model.predict(scale(o), deterministic=True)[0]  # noqa: E731
        r = gym_rollouts(act, self.a.env, self.a.eval_episodes, self.a.seed + 10_000)
        now = time.perf_counter()
        row = dict(step=int(self.num_timesteps), seconds=round(now - self.t0, 3), **r,
                   eval_seconds=now - t)  # fmt: skip
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        self.last = self.num_timesteps

    def save(self):
        """The checkpoint at this step (its time left out of the clock, as an evaluation's is)."""
        t, step, d = time.perf_counter(), int(self.num_timesteps), self.path.parent
        files = dict(model=f"model-{step}.zip")
        self.model.save(d / files["model"])
        if hasattr(self.model, "save_replay_buffer"):  # off-policy
            files["replay"] = f"replay-{step}.pkl"
            self.model.save_replay_buffer(d / files["replay"])
        if self.norm is not None:
            files["norm"] = f"norm-{step}.pkl"
            self.norm.save(d / files["norm"])
        state = dict(step=step, seconds=round(t - self.t0, 3), last_eval=int(self.last), **files)
        (d / "checkpoint.json.tmp").write_text(json.dumps(state))
        os.replace(d / "checkpoint.json.tmp", d / "checkpoint.json")
        for kind in ("model", "replay", "norm"):  # the checkpoint before
            for old in d.glob(f"{kind}-*"):
                if old.name not in files.values():
                    old.unlink()
        self.saved = step
        self.t0 += time.perf_counter() - t

    def _on_rollout_start(self):  # right after an update (PPO: after `train()`)
        if self.a.eval_every and self.num_timesteps - self.last >= self.a.eval_every:
            self.evaluate()
        if self.a.save_every and self.num_timesteps - self.saved >= self.a.save_every:
            self.save()

    def _on_step(self):
        return True


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("algo", choices=sorted(ALGOS))
    p.add_argument("--env", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-steps", type=int, required=True)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--out-dir", default="runs")
    p.add_argument("--save-every", type=int, default=0, help="a checkpoint every N env steps")
    p.add_argument("--resume", type=Path, help="RUN_DIR/checkpoint.json to go on from")
    a = p.parse_args()
    if (a.algo, a.env) not in ZOO:
        p.error(f"no RL Zoo setting here for {a.algo} on {a.env}: {sorted(ZOO)}")
    torch.set_num_threads(1)
    kwargs = dict(ZOO[(a.algo, a.env)])
    n_envs, normalize = kwargs.pop("n_envs", 1), kwargs.pop("normalize", False)
    for k in ("learning_rate", "clip_range"):
        if isinstance(kwargs.get(k), str) and kwargs[k].startswith("lin_"):
            x0 = float(kwargs[k][4:])
            kwargs[k] = lambda progress_remaining, x0=x0: progress_remaining * x0
    if "noise_std" in kwargs:
        std = kwargs.pop("noise_std")
        dim = gym.make(a.env).action_space.shape[0]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(dim), std * np.ones(dim))
    run_dir = Path(a.out_dir) / f"{a.env}__sb3_{a.algo}__s{a.seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics, state = run_dir / "metrics.jsonl", None
    if a.resume:
        state = json.loads(a.resume.read_text())
        run_dir = a.resume.parent  # its evaluations up to the checkpoint kept, the rest done again
        metrics = run_dir / "metrics.jsonl"
        kept = metrics.read_text().splitlines()
        rows = [r for r in kept if json.loads(r)["step"] <= state["step"]]
        metrics.write_text("".join(row + "\n" for row in rows))
    else:
        metrics.unlink(missing_ok=True)
    done = state["step"] if state else 0
    env = make_vec_env(a.env, n_envs=n_envs, seed=a.seed + done)
    if normalize:  # the zoo's `normalize: true`
        env = norm = VecNormalize.load(run_dir / state["norm"], env) if state else VecNormalize(env)
    else:
        norm = None
    if state:
        model = ALGOS[a.algo].load(run_dir / state["model"], env=env, device="cpu")
        if "replay" in state:
            model.load_replay_buffer(run_dir / state["replay"])
    else:
        model = ALGOS[a.algo]("MlpPolicy", env, seed=a.seed, device="cpu", verbose=0, **kwargs)
    versions = dict(torch=torch.__version__, sb3=__import__("stable_baselines3").__version__,
                    gymnasium=gym.__version__, threads=torch.get_num_threads())  # fmt: skip
    settings = {**ZOO[(a.algo, a.env)], **vars(a), "versions": versions}
    if state:
        settings["resumed_at"] = done
    (run_dir / "args.json").write_text(json.dumps(settings, indent=1, default=str))
    clock = Evaluations(a, metrics, norm, state)
    # resumed: the rest of the budget, SB3's step count (and with it its schedules) carried on
    try:
        model.learn(a.total_steps - done, callback=clock, reset_num_timesteps=not state)
    except KeyboardInterrupt:  # Ctrl-C (the runner's --max-seconds): a checkpoint here, then out
        if a.save_every and clock.num_timesteps > clock.saved:
            clock.save()
        print(f"{run_dir}: stopped at {clock.num_timesteps:,} env steps", flush=True)
        sys.exit(130)
    ended = [json.loads(r) for r in metrics.read_text().splitlines()[-1:]] if state else []
    if not (ended and ended[0]["step"] == model.num_timesteps):  # (resumed at its end: it has one)
        clock.evaluate()  # the final policy
    if a.save_every and clock.saved < model.num_timesteps:
        clock.save()
    print(f"{run_dir}: final {clock.path.read_text().splitlines()[-1]}", flush=True)


if __name__ == "__main__":
    main()
