"""A2C: synchronous advantage actor-critic on vectorized environments.

Advantage Actor-Critic (the synchronous variant of A3C, Mnih et al., 2016, arXiv:1602.01783) with
generalized advantage estimation (arXiv:1506.02438), for discrete and continuous actions. It is
`algos/ppo_vec.py` without PPO's machinery: each rollout gives exactly one gradient step on the
whole batch with the plain policy-gradient loss

    loss = -mean(A * log pi(a|s)) + vf_coef * mean((V(s) - R)^2) / 2 - ent_coef * mean(H[pi(.|s)])

(no ratio clipping, no epochs, no minibatches). The many sub-envs replace A3C's asynchronous
workers as the source of decorrelated data. Truncation bootstraps from `final_obs`; GAE runs on
the device.

    python algos/a2c.py --env CartPole-v1
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from common.cli import Clip, Count, Count0, Layers, NonNeg, Rate, RunArgs, Unit, cli
from common.device import compile_fn
from common.distributions import Categoricals, Normal, action_nvec
from common.errors import UserError
from common.graphs import Captured
from common.logger import Meter
from common.policy import Policy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent, group_dims, group_spaces
from common.wrappers import wrap_env

ALGO = "a2c"


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    num_envs: int = 8
    total_steps: Count = 300_000
    eval_every: Count0 = 50_000
    save_every: Count0 = 100_000
    compile: bool = False
    """torch.compile the policy step, GAE, the A2C loss (forward and backward) and the
    optimizer step, learning-rate annealing included (on CUDA: CUDA graphs, the optimizer step's excepted)"""
    capture: bool = True
    """on CUDA, replay each iteration (rollout, GAE, update) as one CUDA graph (common/graphs.py);
    not with --compile, and eager wherever the env does not allow it (a warning says why)"""

    # A2C
    num_steps: Count = 5
    """rollout horizon per sub-env per iteration"""
    learning_rate: Rate = 7e-4
    """Adam learning rate"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0"""
    gamma: Unit = 0.99
    """discount factor"""
    gae_lambda: Unit = 1.0
    """GAE lambda"""
    norm_adv: bool = False
    """normalize advantages over the batch"""
    ent_coef: NonNeg = 0.0
    """entropy bonus coefficient"""
    vf_coef: NonNeg = 0.5
    """value loss coefficient"""
    max_grad_norm: Clip = 0.5
    """global gradient-norm clip"""
    hidden: Layers = (64, 64)
    """hidden layer sizes of actor and critic"""
    norm_obs: bool = False
    """normalize observations with running statistics (saved in the checkpoint)"""
    norm_reward: bool = False
    """scale rewards by the running std of the discounted return"""
    init_log_std: float = 0.0
    """initial log-std of the Gaussian policy (continuous actions)"""


# ppo_vec's massively parallel locomotion defaults (many envs, short horizon, normalized observations and
# rewards) for the batched MuJoCo tasks, with one large-batch A2C step per rollout (not tuned on MuJoCo).
MUJOCO_DEFAULTS = dict(num_envs=4096, num_steps=16, learning_rate=3e-4,
                       max_grad_norm=1.0, hidden=(256, 128, 64), norm_obs=True, norm_reward=True,
                       total_steps=50_000_000, eval_every=5_000_000, save_every=5_000_000)

# on a CPU (fewer than 1024 envs): ppo_vec's CPU shape, 64 envs x 64 steps (not tuned on MuJoCo either)
MUJOCO_CPU_DEFAULTS = dict(MUJOCO_DEFAULTS, num_envs=64, num_steps=64, total_steps=5_000_000, eval_every=250_000,
                           save_every=1_000_000)
# Initial std 0.37, not 1: far better returns on the CPU defaults. Per-task rows over those (`--env X --help` lists
# them); classic control's from bench/sweep.py. (bench/README.md#defaults-the-evidence)
TASK_DEFAULTS: dict[str, dict] = {
    **{t: dict(init_log_std=-1.0) for t in ("Ant-v5", "HalfCheetah-v5", "Walker2d-v5")},
    # lr 3e-3 (was 7e-4): sooner to 475, as well held at the end (bench/README.md#defaults-the-evidence)
    "CartPole-v1": dict(learning_rate=3e-3),
    # 16 envs x 8 steps, lr 3e-3, gamma 0.9, GAE 0.95, scaled rewards, normalized
    # advantages (bench/README.md#defaults-the-evidence)
    "Pendulum-v1": dict(num_envs=16, num_steps=8, learning_rate=3e-3, gamma=0.9, gae_lambda=0.95, norm_reward=True,
                        norm_adv=True, total_steps=400_000),
    # 16 x 64 steps, normalized observations and rewards (bench/README.md#defaults-the-evidence)
    "MountainCarContinuous-v0": dict(num_envs=16, num_steps=64, learning_rate=1e-3, norm_obs=True, norm_reward=True,
                                     total_steps=300_000),
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
    if args.num_steps <= 0:
        raise UserError("--num-steps must be positive")
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


def a2c_loss(agent: Agent, args: Args, b: Batch):
    """Policy-gradient + value + entropy loss on the whole rollout; returns (loss, stats tensor)."""
    logp, entropy, value = agent.evaluate_actions(b["obs"], b["actions"])
    advantages, returns = b["advantages"], b["returns"]
    if args.norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss = -(advantages * logp).mean()
    v_loss = 0.5 * (value - returns).square().mean()
    ent = entropy.mean()
    loss = (pg_loss - args.ent_coef * ent if args.ent_coef else pg_loss) + args.vf_coef * v_loss  # 0: no entropy backward
    return loss, dict(pg_loss=pg_loss.detach(), v_loss=v_loss.detach(), entropy=ent.detach())


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
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5, capturable=device.type == "cuda")

    batch_size = args.num_envs * args.num_steps
    num_iterations = args.total_steps // batch_size
    T, N = args.num_steps, args.num_envs
    # where the next rollout starts, a fixed buffer as all state of the iteration; the rollout storage on the device
    next_obs = Batch(env.reset(seed=args.seed)[0]).clone()
    action = torch.zeros((N, *act_space.shape), device=device, dtype=torch.long if agent.discrete else torch.float32)
    f = torch.zeros(N, device=device)
    store = Batch.zeros(T, obs=next_obs, final_obs=next_obs, actions=action, values=f, rewards=f, dones=f, trunc=f)

    def opt_step():  # gradient clipping and the Adam step
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()

    act_fn, loss_fn, gae_fn, step_fn = agent.act, a2c_loss, compute_gae, opt_step
    if args.compile:
        act_fn, loss_fn, gae_fn = compile_fn(agent.act, device), compile_fn(a2c_loss, device), compile_fn(compute_gae, device)
        step_fn = compile_fn(opt_step, device, graphs=False)

    # the deployable policy: observation normalizer, actor, action scaling to the env's own bounds (common/policy.py)
    policy = Policy.of(agent, net, env, act="deterministic")
    # the state a checkpoint holds and a resumed run restores, named once
    run.start(env, dict(model=agent, optimizer=optimizer, env=env, next_obs=next_obs), policy)
    guard = run.guard
    meter = Meter(device, "pg_loss", "v_loss", "entropy")  # summed on the device, read at the logging tick

    def train_iteration():
        """A rollout of T steps from `next_obs`, GAE, then the update: one iteration, on fixed tensors."""
        # ---- rollout ----------------------------------------------------------------------------
        with torch.no_grad():
            obs = next_obs
            for t in range(T):
                action, logp, value = act_fn(obs)
                store[t] = dict(obs=obs, actions=action, values=value)
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
        b = Batch(obs=store["obs"], actions=store["actions"], advantages=advantages, returns=returns).flatten()
        loss, stats = loss_fn(agent, args, b)
        meter.add(**stats)
        guard.watch("A2C loss", loss)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        step_fn()
        guard.watch_params("parameters", agent)

    # on CUDA one graph launch an iteration, not thousands of kernel launches;
    # the check before capture needs every piece of state the iteration writes
    iterate = Captured(train_iteration, device, state=[env, guard, meter, optimizer],
                       enabled=args.capture and not args.compile)
    # after each iteration the shell counts its steps, checks for NaN, evaluates, logs and checkpoints on their ticks
    for iteration in run.iterations(num_iterations, batch_size,
                                    metrics=lambda: dict(**meter.pop(), lr=optimizer.param_groups[0]["lr"])):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"].fill_(args.learning_rate * (1.0 - iteration / num_iterations))
        iterate()
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: observation normalization, the
    deterministic actor, action rescaling), rebuilt without an env; takes torch or numpy, batched or single obs."""
    return Policy.restore(path, ALGO, Agent, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
