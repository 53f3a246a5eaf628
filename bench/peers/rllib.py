"""RLlib as a benchmark peer (issue 60; the rllib groups): RLlib's PPO with its own MuJoCo settings
on gymnasium's env, evaluated the way the other sides are. Runs in RLlib's own venv
(`bench/.venv-rllib`, built by bench/run.py: ray[rllib] pins a gymnasium older than the project's);
imports nothing from the project; writes our metrics schema.

    bench/.venv-rllib/bin/python bench/peers/rllib.py ppo --env Hopper-v5 --seed 1 \
        --total-steps 1000000 --eval-every 262144 --out-dir runs [--env-runners 1]

Writes `OUT_DIR/<env>__rllib__s<seed>/metrics.jsonl`: a row per evaluation (`step`, `seconds` from
the clock's start, evaluations included, `eval_seconds`, `eval_return`, `eval_return_std`,
`iterations`, `train_episode_return`), then the final policy on gymnasium's env (`gym_return`,
`gym_return_std`, `gym_returns`); `args.json` has the config and versions.

Settings: the ray repository's `rllib/examples/algorithms/ppo/mujoco_ppo.py` (the new API stack's
MuJoCo PPO example; the wheel ships no tuned examples), as written there: MeanStdFilter on
observations, 2048 env steps per iteration in rollout fragments of 32, minibatch 512, 10 epochs,
lr 3e-4, entropy 0.01 annealed to 0 over 2M steps, KL coefficient 0.5, clip 0.2, value clip 10,
value-loss coefficient 1, global-norm clipping 50, separate 256x256 tanh actor and critic with
orthogonal init and a 256 head, free log-std, gamma 0.99, lambda 0.95. One change of resources: the
example spreads its 64 envs over 4 env runners (16 each); here the 64 envs run on one core, either
all in the driver (`--env-runners 0`, all-local) or in one remote env runner (`--env-runners 1`).

Counting: RLlib's own counter includes the reset step gymnasium's vector env takes after each
episode end (the action ignored), 2-5% over the real steps on these tasks; each sub-env here is
wrapped in a counter of real `step` calls, and every budget, curve and rate uses that count.

Clock: starts after the algorithm (env runners, learner, modules) is built; evaluations are timed
(the report leaves them out), as for the other sides. Evaluation: deterministic (the
distribution's mode), observations through the trained filter without updating it, the action
unsquashed to the env's bounds as RLlib's own env-to-module path does, on gymnasium's env
(episode seeds 10000 + seed + i during training; the final 10 on seeds 20000 + i as every side).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np


class CountSteps(gym.Wrapper):
    """Counts the env's real `step` calls (RLlib's counter also counts vector-env reset steps)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.real_steps = 0

    def step(self, action):
        self.real_steps += 1
        return self.env.step(action)


def make_counted(ctx) -> gym.Env:
    return CountSteps(gym.make(ctx["task"]))


def runner_steps(env_runner) -> int:
    return sum(e.get_wrapper_attr("real_steps") for e in env_runner.env.unwrapped.envs)


def rllib_config(task: str, seed: int, num_envs: int, env_runners: int, vf_clip: float = 10.0):
    """mujoco_ppo.py's PPOConfig (see the module docstring), on `num_envs` envs; `vf_clip` is the
    example's `vf_clip_param` (RLlib clamps each sample's squared value error at it)."""
    import rllib as me  # this file, by reference, so that a remote env runner imports it
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module.mean_std_filter import MeanStdFilter
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env
    from torch.nn.init import orthogonal_

    register_env("counted-mujoco", me.make_counted)
    return (
        PPOConfig()
        .environment(env="counted-mujoco", env_config={"task": task})
        .env_runners(
            num_env_runners=env_runners,
            num_envs_per_env_runner=num_envs,
            rollout_fragment_length=32,
            env_to_module_connector=lambda env, spaces, device: MeanStdFilter(),
        )
        .learners(num_learners=0)
        .training(
            train_batch_size_per_learner=2048,
            minibatch_size=512,
            num_epochs=10,
            lr=0.0003,
            vf_loss_coeff=1.0,
            entropy_coeff=[[0, 0.01], [2_000_000, 0.0]],
            gamma=0.99,
            lambda_=0.95,
            kl_coeff=0.5,
            clip_param=0.2,
            vf_clip_param=vf_clip,
            grad_clip=50.0,
            grad_clip_by="global_norm",
        )
        .rl_module(
            model_config=DefaultModelConfig(
                vf_share_layers=False,
                fcnet_hiddens=[256, 256],
                fcnet_kernel_initializer=orthogonal_,
                fcnet_activation="tanh",
                head_fcnet_hiddens=[256],
                head_fcnet_activation=None,
                free_log_std=True,
            )
        )
        .debugging(seed=seed)
    )


def make_policy(algo, env_runners: int):
    """The trained module's deterministic action on a raw gymnasium observation, through a frozen
    copy of the env runner's MeanStdFilter and RLlib's unsquashing to the action bounds."""
    import torch
    from ray.rllib.connectors.env_to_module.mean_std_filter import MeanStdFilter
    from ray.rllib.core.columns import Columns
    from ray.rllib.utils.spaces.space_utils import unsquash_action

    def state_of(er):
        return er._env_to_module.get_state()

    if env_runners == 0:
        states = [state_of(algo.env_runner)]
    else:
        states = algo.env_runner_group.foreach_env_runner(state_of, local_env_runner=False)
    (filt,) = [s for s in states[0].values() if isinstance(s, dict) and None in s]
    env = gym.make(algo.config.env_config["task"])  # its spaces
    stats = MeanStdFilter(update_stats=False)
    stats.input_observation_space = env.observation_space
    stats.set_state(filt)
    module = algo.get_module()
    dist_cls = module.get_inference_action_dist_cls()
    act_space = env.action_space
    env.close()

    @torch.no_grad()
    def policy(obs: np.ndarray) -> np.ndarray:
        x = stats._filters[None](obs[None], update=False).astype(np.float32)
        out = module.forward_inference({Columns.OBS: torch.from_numpy(x)})
        dist = dist_cls.from_logits(out[Columns.ACTION_DIST_INPUTS])
        a = dist.to_deterministic().sample()[0].numpy()
        return unsquash_action(a, act_space)

    return policy


def rollouts(policy, task: str, episodes: int, seed: int) -> dict:
    env = gym.make(task)
    returns = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    r = np.asarray(returns)
    return {"eval_return": float(r.mean()), "eval_return_std": float(r.std()), "returns": returns}


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("algo", choices=["ppo"])
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-steps", type=int, default=1_000_000)
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--env-runners", type=int, default=0, choices=(0, 1))
    p.add_argument("--eval-every", type=int, default=262_144)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--gym-episodes", type=int, default=10)
    p.add_argument("--gym-seed", type=int, default=20_000)
    p.add_argument(
        "--vf-clip",
        type=float,
        default=10.0,
        help="vf_clip_param (default: the example's 10; RLlib clamps each sample's squared value "
        "error at it, so with unnormalized MuJoCo returns most samples give the critic no "
        "gradient: a diagnostic, not the benchmark's setting)",
    )
    p.add_argument("--out-dir", default="runs")
    a = p.parse_args()
    if not a.env.endswith("-v5"):
        p.error(f"--env {a.env}: give gymnasium's id, e.g. {a.env}-v5")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")]
    )
    import ray
    import torch

    torch.set_num_threads(1)
    # one core (the caller's taskset): the driver and, with --env-runners 1, one env runner
    ray.init(num_cpus=1 + a.env_runners, include_dashboard=False, log_to_driver=False)
    config = rllib_config(a.env, a.seed, a.num_envs, a.env_runners, a.vf_clip)
    algo = config.build_algo()

    def real_steps() -> int:
        if a.env_runners == 0:
            return runner_steps(algo.env_runner)
        return sum(algo.env_runner_group.foreach_env_runner(runner_steps, local_env_runner=False))

    run_dir = Path(a.out_dir) / f"{a.env}__rllib__s{a.seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    keep = "train_batch_size_per_learner minibatch_size num_epochs lr entropy_coeff kl_coeff "
    keep += "clip_param vf_clip_param vf_loss_coeff grad_clip gamma lambda rollout_fragment_length "
    keep = (keep + "num_envs_per_env_runner num_env_runners").split()
    settings = dict(
        vars(a),
        versions=dict(ray=ray.__version__, gymnasium=gym.__version__, torch=torch.__version__),
        config_source="ray-project/ray rllib/examples/algorithms/ppo/mujoco_ppo.py",
        config={k: v for k, v in algo.config.to_dict().items() if k.lstrip("_") in keep},
    )
    (run_dir / "args.json").write_text(json.dumps(settings, indent=1, default=str))
    metrics = open(run_dir / "metrics.jsonl", "w")
    next_eval, iters, t0 = a.eval_every, 0, time.perf_counter()
    while True:
        result = algo.train()
        iters += 1
        steps = real_steps()
        last = steps >= a.total_steps
        if steps < next_eval and not last:
            continue
        next_eval += a.eval_every
        te = time.perf_counter()
        res = rollouts(make_policy(algo, a.env_runners), a.env, a.eval_episodes, 10_000 + a.seed)
        now = time.perf_counter()
        # train_episode_return: RLlib's own mean over recent training episodes (stochastic
        # actions), a check on the evaluation
        own = result["env_runners"].get("episode_return_mean")
        row = dict(step=steps, seconds=round(now - t0, 3), eval_seconds=now - te,
                   eval_return=res["eval_return"], eval_return_std=res["eval_return_std"],
                   iterations=iters, train_episode_return=own)  # fmt: skip
        metrics.write(json.dumps(row) + "\n")
        metrics.flush()
        if last:
            break
    ref = rollouts(make_policy(algo, a.env_runners), a.env, a.gym_episodes, a.gym_seed)
    gym_row = dict(step=row["step"], gym_return=ref["eval_return"],
                   gym_return_std=ref["eval_return_std"], gym_returns=ref["returns"])  # fmt: skip
    metrics.write(json.dumps(gym_row) + "\n")
    metrics.close()
    algo.stop()
    ray.shutdown()


if __name__ == "__main__":
    main()
