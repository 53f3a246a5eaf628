"""PPO-Clip on massively parallel, on-device vectorized environments.

Proximal Policy Optimization (Schulman et al., 2017, arXiv:1707.06347) with generalized advantage
estimation (Schulman et al., 2016, arXiv:1506.02438), for discrete (one categorical per dimension of a
Discrete or MultiDiscrete space, forbidden actions masked out where the env gives `info["action_mask"]`)
and continuous (diagonal Gaussian, state-independent log-std) actions. Every sub-env steps in one batched
call; rollout storage, GAE and the minibatch updates stay on the training device.

Details that matter:
* truncation (time limit) bootstraps: the reward of a truncated step gets `gamma * V(final_obs)`;
  termination does not. All `final_obs` values are computed in one batched forward after the rollout.
* advantages normalized per minibatch; optional value clipping; global grad-norm clipping;
  linear learning-rate annealing or rsl_rl's adaptive-KL schedule (`--lr-schedule adaptive`); optional
  early stop of the epochs at `target_kl`.
* continuous actions are sampled unbounded, clipped to [-1, 1] and rescaled to the env's bounds
  by `common.wrappers.RescaleAction`; the log-probability is that of the unclipped sample.

    python algos/ppo_vec.py --env CartPole-v1              # its TASK_DEFAULTS row: 64 envs x 4 steps
    python algos/ppo_vec.py --env Ant --num-envs 4096      # MuJoCo defaults (see MUJOCO_DEFAULTS)

Multi-process training (torchrun, model fusion) is in `algos/ppo_podracer.py`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from common.cli import Clip, Count, Layers, NonNeg, Rate, RunArgs, Unit, cli
from common.device import compile_fn
from common.distributions import Categoricals, Normal, action_nvec
from common.errors import UserError
from common.graphs import Captured
from common.logger import Meter
from common.optim import adapt_lr
from common.policy import Policy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent, group_dims, group_spaces
from common.wrappers import wrap_env

ALGO = "ppo_vec"


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    num_envs: int = 1024
    compile: bool = False
    """torch.compile the policy step, GAE, the PPO loss (forward and backward) and the
    optimizer step, learning-rate annealing included (on CUDA: CUDA graphs, the optimizer step's excepted)"""
    capture: bool = True
    """on CUDA, replay each iteration (rollout, GAE, update) as one CUDA graph (common/graphs.py);
    not with --compile or --target-kl, and eager wherever the env does not allow it (a warning says why)"""

    # PPO
    num_steps: Count = 16
    """rollout horizon per sub-env per iteration"""
    learning_rate: Rate = 2.5e-3
    """Adam learning rate"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 (with --lr-schedule linear)"""
    lr_schedule: Literal["linear", "adaptive"] = "linear"
    """linear: --anneal-lr or constant; adaptive: rsl_rl's KL rule after each minibatch (common/optim.py)"""
    desired_kl: Rate = 0.01
    """the KL per minibatch that --lr-schedule adaptive steers the learning rate to"""
    gamma: Unit = 0.99
    """discount factor"""
    gae_lambda: Unit = 0.95
    """GAE lambda"""
    num_minibatches: Count = 8
    """minibatches per epoch"""
    update_epochs: Count = 4
    """epochs over each rollout"""
    norm_adv: bool = True
    """normalize advantages per minibatch"""
    clip_coef: Rate = 0.2
    """policy ratio clip"""
    clip_vloss: bool = False
    """clip the value loss around the old values"""
    ent_coef: NonNeg = 0.0
    """entropy bonus coefficient"""
    vf_coef: NonNeg = 0.5
    """value loss coefficient"""
    max_grad_norm: Clip = 0.5
    """global gradient-norm clip"""
    target_kl: float | None = None
    """stop the epochs early when the approximate KL exceeds this (one host sync per epoch)"""
    hidden: Layers = (64, 64)
    """hidden layer sizes of actor and critic"""
    norm_obs: bool = False
    """normalize observations with running statistics (saved in the checkpoint)"""
    norm_reward: bool = False
    """scale rewards by the running std of the discounted return"""
    init_log_std: float = 0.0
    """initial log-std of the Gaussian policy (continuous actions)"""


# Massively parallel locomotion (many envs, short horizon, few large minibatches, normalized
# observations and rewards), as in Rudin et al. 2021 (arXiv:2109.11978) and Brax's PPO: the defaults
# for the batched MuJoCo tasks, so that `--env Ant --num-envs 4096` needs no other flag on a GPU.
MUJOCO_DEFAULTS = dict(num_envs=4096, num_steps=16, num_minibatches=4, update_epochs=5, learning_rate=3e-4,
                       max_grad_norm=1.0, hidden=(256, 128, 64), norm_obs=True, norm_reward=True,
                       total_steps=50_000_000, eval_every=5_000_000, save_every=5_000_000)

# On a CPU (fewer than 1024 envs): the shape that ran the most env steps a second on one
# core (bench/README.md#defaults-the-evidence)
MUJOCO_CPU_DEFAULTS = dict(MUJOCO_DEFAULTS, num_envs=64, num_steps=64, num_minibatches=8, total_steps=5_000_000,
                           eval_every=250_000, save_every=1_000_000)
# Initial std 0.37, not 1: far better returns on the CPU defaults. Per-task rows over those (`--env X --help` lists
# them); classic control's from bench/sweep.py. (bench/README.md#defaults-the-evidence)
TASK_DEFAULTS: dict[str, dict] = {
    **{t: dict(init_log_std=-1.0) for t in ("Ant-v5", "HalfCheetah-v5", "Walker2d-v5")},
    # 64 envs x 4 steps, one minibatch, normalized observations (sweep rounds
    # 1-9) (bench/README.md#defaults-the-evidence)
    "CartPole-v1": dict(num_envs=64, num_steps=4, num_minibatches=1, learning_rate=5e-3, norm_obs=True,
                        total_steps=300_000),
    # 64 x 64 steps, 32 minibatches x 5 epochs, gamma 0.9, scaled rewards (bench/README.md#defaults-the-evidence)
    "Pendulum-v1": dict(num_envs=64, num_steps=64, num_minibatches=32, update_epochs=5, learning_rate=1e-3, gamma=0.9,
                        norm_reward=True, total_steps=100_000),
    # 16 x 64 steps, 4 minibatches, normalized observations and rewards (bench/README.md#defaults-the-evidence)
    "MountainCarContinuous-v0": dict(num_envs=16, num_steps=64, num_minibatches=4, update_epochs=5, learning_rate=1e-3,
                                     norm_obs=True, norm_reward=True, total_steps=300_000),
}


def default_args(env_id: str, num_envs: int | None = None, device: str = "auto") -> Args:
    """The defaults for a task: `Args()`, for the batched MuJoCo tasks with `MUJOCO_DEFAULTS` if massively parallel
    (`--num-envs` >= 1024, or none given and a GPU), else `MUJOCO_CPU_DEFAULTS`; then the task's `TASK_DEFAULTS` row."""
    import envs  # here, not at the top: a checkpoint's policy loads without the env package
    task = TASK_DEFAULTS.get(envs.mujoco_id(env_id) or env_id, {})
    if envs.mujoco_id(env_id) is None:
        return replace(Args(env=env_id), **task)
    big = num_envs >= 1024 if num_envs is not None else (device != "cpu" and torch.cuda.is_available())
    return replace(Args(env=env_id), **{**(MUJOCO_DEFAULTS if big else MUJOCO_CPU_DEFAULTS), **task})


def check_args(args: Args, envs_) -> None:
    check_single_agent(envs_, args.env, ALGO, groups=True, masks=True)
    batch = args.num_envs * args.num_steps
    if args.num_steps <= 0 or args.num_minibatches <= 0 or args.update_epochs <= 0 or args.desired_kl <= 0:
        raise UserError("--num-steps, --num-minibatches, --update-epochs and --desired-kl must be positive")
    if batch % args.num_minibatches:
        raise UserError(f"num_envs * num_steps = {batch} is not divisible by --num-minibatches "
                         f"{args.num_minibatches}; pick a divisor of {batch}")
    if batch < args.num_minibatches:
        raise UserError(f"batch {batch} is smaller than --num-minibatches {args.num_minibatches}")
    if args.total_steps < batch:
        raise UserError(f"--total-steps {args.total_steps} is below one rollout (num_envs * num_steps = {batch})")
    if any(len(s.shape) != 1 for s in group_spaces(envs_.single_observation_space)):
        raise UserError(f"{ALGO}'s MLP needs flat observations, {args.env} has {envs_.single_observation_space}")
    space = envs_.single_action_space
    if not isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.Box)):
        raise UserError(f"{ALGO} supports Discrete, MultiDiscrete and Box action spaces, got {space}")


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(sizes, out_std: float) -> nn.Sequential:
    layers = []
    for a, b in zip(sizes[:-2], sizes[1:-1]):
        layers += [layer_init(nn.Linear(a, b)), nn.Tanh()]
    layers.append(layer_init(nn.Linear(sizes[-2], sizes[-1]), std=out_std))
    return nn.Sequential(*layers)


class Agent(nn.Module):
    """Actor and critic over named observation groups: the actor reads `policy` (and `action_mask`, where the env
    masks), the critic `critic` (privileged state) where the env has that group, else `policy`."""

    def __init__(self, obs_dim: int, action_space: gym.Space, hidden=(64, 64), init_log_std=0.0, critic_dim=0):
        super().__init__()
        self.critic_group = "critic" if critic_dim else "policy"
        self.nvec = action_nvec(action_space)  # one categorical per discrete dimension; None: Gaussian
        self.discrete, self.multi = self.nvec is not None, isinstance(action_space, gym.spaces.MultiDiscrete)
        out = sum(self.nvec) if self.discrete else int(np.prod(action_space.shape))
        self.critic = mlp([critic_dim or obs_dim, *hidden, 1], out_std=1.0)
        self.actor = mlp([obs_dim, *hidden, out], out_std=0.01)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((out,), float(init_log_std)))

    def value(self, obs: dict) -> torch.Tensor:
        return self.critic(obs[self.critic_group]).squeeze(-1)

    def dist(self, obs: dict):
        out = self.actor(obs["policy"])
        if self.discrete:  # the env's action mask (if any): a forbidden action has probability 0
            return Categoricals(out, self.nvec, obs.get("action_mask"), self.multi)
        return Normal(out, self.log_std.exp().expand_as(out))

    def act(self, obs: dict):
        """Sample actions; return (action, log_prob, value)."""
        d = self.dist(obs)
        action = d.sample() if self.discrete else d.rsample()  # sample()'s numbers without its host sync on CUDA
        logp = d.log_prob(action) if self.discrete else d.log_prob(action).sum(-1)
        return action, logp, self.value(obs)

    def evaluate_actions(self, obs: dict, action: torch.Tensor):
        d = self.dist(obs)
        if self.discrete:
            return d.log_prob(action.long()), d.entropy(), self.value(obs)
        return d.log_prob(action).sum(-1), d.entropy().sum(-1), self.value(obs)

    def deterministic(self, obs: dict) -> torch.Tensor:
        return self.dist(obs).mode() if self.discrete else self.actor(obs["policy"])


def ppo_loss(agent: Agent, args: Args, mb: Batch):
    """Clipped surrogate + value + entropy loss on one minibatch; returns (loss, named statistics)."""
    logp, entropy, value = agent.evaluate_actions(mb["obs"], mb["actions"])
    advantages, returns, old_values = mb["advantages"], mb["returns"], mb["values"]
    log_ratio = logp - mb["logp"]
    ratio = log_ratio.exp()
    if args.norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
    if args.clip_vloss:
        v_clipped = old_values + (value - old_values).clamp(-args.clip_coef, args.clip_coef)
        v_loss = 0.5 * torch.max((value - returns).square(), (v_clipped - returns).square()).mean()
    else:
        v_loss = 0.5 * (value - returns).square().mean()
    ent = entropy.mean()
    loss = (pg_loss - args.ent_coef * ent if args.ent_coef else pg_loss) + args.vf_coef * v_loss  # 0: no entropy backward
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clipfrac = ((ratio - 1).abs() > args.clip_coef).float().mean()
    return loss, dict(pg_loss=pg_loss.detach(), v_loss=v_loss.detach(), entropy=ent.detach(), approx_kl=approx_kl,
                      clipfrac=clipfrac)


@torch.no_grad()
def compute_gae(rewards, values, dones, next_value, gamma: float, lam: float):
    """GAE over a [T, N] rollout; `dones[t]` marks that the episode ended at step t."""
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        next_v = next_value if t == rewards.shape[0] - 1 else values[t + 1]
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_v * not_done - values[t]
        last = delta + gamma * lam * not_done * last
        advantages[t] = last
    return advantages, advantages + values


def make_env(args: Args, device, seed: int):
    import envs  # here, not at the top: a checkpoint's policy loads without the env package
    env = envs.make(args.env, num_envs=args.num_envs, device=device, seed=seed, backend=args.mujoco_backend)
    return wrap_env(env, norm_obs=args.norm_obs, norm_reward=args.norm_reward, gamma=args.gamma, groups=True)


def main(args: Args) -> dict:
    run = Run(ALGO, args, defaults=default_args)  # device, --resume (with its settings), seeds
    args, device = run.args, run.device
    env = make_env(args, device, args.seed)
    check_args(args, env)
    obs_space, act_space = env.single_observation_space, env.single_action_space
    obs_dim, critic_dim = group_dims(obs_space)  # critic_dim 0: no privileged `critic` group
    net = dict(obs_dim=obs_dim, action_space=act_space, hidden=args.hidden, init_log_std=args.init_log_std,
               critic_dim=critic_dim)
    agent = Agent(**net).to(device)
    # the learning rate is a tensor that annealing fills in place, so that a compiled optimizer step covers it (float64:
    # the same arithmetic as a Python float); capturable on CUDA: Adam's step counter stays on the device
    lr = torch.tensor(args.learning_rate, dtype=torch.float64, device=device)
    adam_kw = dict(capturable=True) if device.type == "cuda" else dict(fused=device.type == "cpu")  # CPU: one fused kernel
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5, **adam_kw)

    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_steps // batch_size
    T, N = args.num_steps, args.num_envs
    # where the next rollout starts, a fixed buffer as all state of the iteration; the rollout storage on the device
    next_obs = Batch(env.reset(seed=args.seed)[0]).clone()
    action = torch.zeros((N, *act_space.shape), device=device, dtype=torch.long if agent.discrete else torch.float32)
    f = torch.zeros(N, device=device)
    store = Batch.zeros(T, obs=next_obs, final_obs=next_obs, actions=action, logp=f, values=f, rewards=f, dones=f,
                        trunc=f)

    def opt_step():  # gradient clipping and the Adam step
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()

    act_fn, loss_fn, gae_fn, step_fn = agent.act, ppo_loss, compute_gae, opt_step
    if args.compile:
        act_fn, loss_fn, gae_fn = compile_fn(agent.act, device), compile_fn(ppo_loss, device), compile_fn(compute_gae, device)
        step_fn = compile_fn(opt_step, device, graphs=False)

    # the deployable policy: observation normalizer, actor, action scaling to the env's own bounds (common/policy.py)
    policy = Policy.of(agent, net, env, act="deterministic")
    # the state a checkpoint holds and a resumed run restores, named once
    run.start(env, dict(model=agent, optimizer=optimizer, env=env, next_obs=next_obs), policy)
    guard = run.guard
    meter = Meter(device, "pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac")  # summed on the device, read at the logging tick

    def train_iteration():
        """A rollout of T steps from `next_obs`, GAE, then the update: one iteration, on fixed tensors."""
        # ---- rollout ----------------------------------------------------------------------------
        with torch.no_grad():
            obs = next_obs
            for t in range(T):
                action, logp, value = act_fn(obs)
                store[t] = dict(obs=obs, actions=action, logp=logp, values=value)
                obs, reward, terminated, truncated, info = env.step(action)
                guard.watch("observations", obs, info["final_obs"])
                guard.watch("rewards", reward)
                store[t] = dict(rewards=reward, dones=terminated | truncated, trunc=truncated & ~terminated,
                                final_obs=info["final_obs"])
            next_obs.copy_(obs)
            # bootstrap through time limits: r += gamma * V(final_obs) where truncated
            store["rewards"].add_(args.gamma * agent.value(store["final_obs"]) * store["trunc"])
            advantages, returns = gae_fn(store["rewards"], store["values"], store["dones"], agent.value(next_obs),
                                         args.gamma, args.gae_lambda)

        # ---- update -----------------------------------------------------------------------------
        b = Batch(obs=store["obs"], actions=store["actions"], logp=store["logp"], values=store["values"],
                  advantages=advantages, returns=returns).flatten()
        for epoch in range(args.update_epochs):
            perm = torch.randperm(batch_size, device=device)
            for start in range(0, batch_size, minibatch_size):
                loss, stats = loss_fn(agent, args, b[perm[start:start + minibatch_size]])
                meter.add(**stats)
                guard.watch("PPO loss", loss)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if args.lr_schedule == "adaptive":  # on the device: no host sync
                    adapt_lr(optimizer.param_groups[0]["lr"], stats["approx_kl"], args.desired_kl)
                step_fn()
                guard.watch_params("parameters", agent)
            if args.target_kl is not None and stats["approx_kl"] > args.target_kl:  # host sync, opt-in
                break

    # on CUDA one graph launch an iteration, not thousands of kernel launches;
    # the check before capture needs every piece of state the iteration writes
    iterate = Captured(train_iteration, device, state=[env, guard, meter, optimizer],
                       enabled=args.capture and not args.compile and args.target_kl is None)
    # after each iteration the shell counts its steps, checks for NaN, evaluates, logs and checkpoints on their ticks
    for iteration in run.iterations(num_iterations, batch_size,
                                    metrics=lambda: dict(**meter.pop(), lr=optimizer.param_groups[0]["lr"])):
        if args.anneal_lr and args.lr_schedule == "linear":
            optimizer.param_groups[0]["lr"].fill_(args.learning_rate * (1.0 - iteration / num_iterations))
        iterate()
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: observation normalization, the
    deterministic actor, action rescaling), rebuilt without an env; takes torch or numpy, batched or single obs."""
    return Policy.restore(path, ALGO, Agent, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
