"""rsl_rl as a benchmark peer (the locomotion groups): rsl_rl's `OnPolicyRunner` (PPO) on our
batched MuJoCo env through `envs.rsl_rl.RslRlVecEnv` (the same env objects as our side), evaluated
the way `algos/ppo_vec.py` evaluates itself. Runs in rsl_rl's own venv (`bench/.venv-rsl_rl`, built
by bench/run.py) and writes our metrics schema.

    bench/.venv-rsl_rl/bin/python bench/peers/rsl_rl.py ppo --env Hopper-v5 --seed 1 \
        --total-steps 1000000 --num-envs 64 --eval-every 262144 --out-dir runs

Writes `OUT_DIR/<env>__rsl_rl__s<seed>/metrics.jsonl`: a row per evaluation (`step`, `seconds` from
the clock's start, evaluations included, `eval_seconds`, `eval_return`, `eval_return_std`), then
the final policy on gymnasium's own env (`gym_return`, `gym_return_std`, `gym_returns`).

Settings: IsaacLab's PPO runner config for its classic Ant and Humanoid tasks (the two files are the
same: `source/isaaclab_tasks/isaaclab_tasks/manager_based/classic/{ant,humanoid}/agents/
rsl_rl_ppo_cfg.py`), written in rsl_rl 5's dict form, for every task (IsaacLab has no Hopper,
HalfCheetah or Walker2d). One change, `--obs-norm` (default on): rsl_rl's own empirical observation
normalization, because IsaacLab's classic tasks scale their observations inside the env and
gymnasium's MuJoCo tasks do not (`--no-obs-norm` runs the config exactly as published).

Clock: starts after the runner, its models and the env are built; evaluations are timed (the
report leaves them out), as for ours. Evaluation: deterministic policy (the actor's mean, clipped to
the action bounds as in training) on a fresh `envs.make(task, num_envs=episodes)`, seed 10000 +
seed, as `ppo_vec` does; the final one also on gymnasium's own env (`tools.evaluate.gym_rollouts`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:  # run as a script
    sys.path[0] = str(ROOT)  # not this folder: `import rsl_rl` must find rsl_rl, not this file
elif str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np
import torch

import envs
from common.evaluate import evaluate
from envs.rsl_rl import RslRlVecEnv
from tools.evaluate import gym_rollouts


def isaaclab_classic_cfg(obs_norm: bool) -> dict:
    """IsaacLab's classic Ant/Humanoid `RslRlOnPolicyRunnerCfg` (MLP [400, 200, 100] elu, init noise
    std 1, lr 5e-4 with the adaptive-KL schedule, desired KL 0.01, 32 steps per env, 5 epochs x 4
    minibatches, clipped value loss, no entropy bonus) as rsl_rl 5's runner dict."""
    model = {
        "class_name": "MLPModel",
        "hidden_dims": [400, 200, 100],
        "activation": "elu",
        "obs_normalization": obs_norm,
    }
    return {
        "num_steps_per_env": 32,
        "save_interval": 50,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "actor": dict(
            model,
            distribution_cfg={
                "class_name": "GaussianDistribution",
                "init_std": 1.0,
                "std_type": "scalar",
            },
        ),
        "critic": dict(model),
        "algorithm": {
            "class_name": "PPO",
            "value_loss_coef": 1.0,
            "use_clipped_value_loss": True,
            "clip_param": 0.2,
            "entropy_coef": 0.0,
            "num_learning_epochs": 5,
            "num_mini_batches": 4,
            "learning_rate": 5.0e-4,
            "schedule": "adaptive",
            "gamma": 0.99,
            "lam": 0.95,
            "desired_kl": 0.01,
            "max_grad_norm": 1.0,
        },
    }


def main() -> None:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("algo", choices=["ppo"])
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-steps", type=int, default=1_000_000)
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=262_144)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--gym-episodes", type=int, default=10)
    p.add_argument("--gym-seed", type=int, default=20_000)
    # torch threads (default: OMP_NUM_THREADS, as the runner sets it from its row, else 1)
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", 1)))
    p.add_argument("--obs-norm", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--device",
        default="cpu",
        help="cpu, or cuda (the env, rsl_rl's runner and the evaluations)",
    )
    p.add_argument(
        "--backend", default="auto", help="MuJoCo backend: auto (warp on CUDA), batch or warp"
    )
    p.add_argument("--out-dir", default="runs")
    a = p.parse_args()
    from rsl_rl.runners import OnPolicyRunner

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    cfg = isaaclab_classic_cfg(a.obs_norm)
    per_iter = a.num_envs * cfg["num_steps_per_env"]
    iters_per_eval = max(1, a.eval_every // per_iter)
    total_iters = a.total_steps // per_iter
    dev = torch.device(a.device)
    env = RslRlVecEnv(
        envs.make(a.env, num_envs=a.num_envs, seed=a.seed, device=dev, backend=a.backend),
        seed=a.seed,
    )
    runner = OnPolicyRunner(env, cfg, log_dir=None, device=str(dev))
    low, high = env.low, env.high

    @torch.no_grad()
    def policy(obs: torch.Tensor) -> torch.Tensor:
        from tensordict import TensorDict

        obs = torch.as_tensor(obs, dtype=torch.float32, device=dev).reshape(
            -1, env.env.single_observation_space.shape[0]
        )
        actor = runner.alg.get_policy()
        return torch.clamp(actor(TensorDict({"policy": obs}, batch_size=[obs.shape[0]])), low, high)

    run_dir = Path(a.out_dir) / f"{a.env}__rsl_rl__s{a.seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = dict(vars(a), config=cfg, backend=getattr(env.env, "backend", None))
    (run_dir / "args.json").write_text(json.dumps(settings, indent=1, default=str))
    metrics = open(run_dir / "metrics.jsonl", "w")
    done_iters, t0 = 0, time.perf_counter()
    while done_iters < total_iters:
        n = min(iters_per_eval, total_iters - done_iters)
        runner.learn(n)
        done_iters += n
        runner.alg.eval_mode()
        res = evaluate(policy, a.env, a.eval_episodes, seed=10_000 + a.seed, device=dev)
        runner.alg.train_mode()
        row = dict(step=done_iters * per_iter, seconds=round(time.perf_counter() - t0, 3),
                   **{k: v for k, v in res.items() if k != "returns"})  # fmt: skip
        metrics.write(json.dumps(row) + "\n")
        metrics.flush()
    runner.alg.eval_mode()
    ref = gym_rollouts(lambda o: policy(o)[0].cpu().numpy(), a.env, a.gym_episodes, a.gym_seed)
    gym = dict(gym_return=ref["eval_return"], gym_return_std=ref["eval_return_std"],
               gym_returns=ref["returns"])  # fmt: skip
    metrics.write(json.dumps(dict(step=row["step"], **gym)) + "\n")
    metrics.close()


if __name__ == "__main__":
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
