"""PPO-H: PPO-Clip with the H-term, on vectorized environments.

`algos/ppo_vec.py` plus ElegantRL's H-term (Hamiltonian term, `h_term_loss`), an extra actor-only
update on whole trajectory windows (`common.buffers.TrajectoryStore`) that trades compute (its share
of wall time is logged, `h_term_time_share`) for stability:
* every rollout step goes into a device trajectory store that keeps the last `h_term_horizon` steps
  of each sub-env and a table of the episodes that finished there;
* every `h_term_update_gap` PPO iterations, the stored episodes are ranked by return, the lowest
  `h_term_drop_rate` (default 1/8) dropped, and `h_term_batch` windows of `h_term_k_step` (default
  16) steps drawn from the rest;
* for each window, H = sum_k h_term_gamma^k * log pi(a_k|s_k) under the current policy; the actor
  takes one extra step on -h_term_lambda * mean(H * normalized episode return).

    python algos/ppo_h.py --env Pendulum-v1
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from common.buffers import TrajectoryStore
from common.cli import Clip, Count, Count0, Layers, NonNeg, Rate, RunArgs, Unit, cli, rollout_shape
from common.distributions import Categoricals, Normal
from common import encoders
from common.errors import UserError
from common.optim import adapt_lr
from common.policy import Policy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent
from common.wrappers import wrap_env

ALGO = "ppo_h"
PARENT, FAMILY = "ppo_vec", "PPO"  # its lineage (CONTRIBUTING.md)


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    num_envs: int = 1024  # number of parallel sub-environments
    # torch.compile the policy step, GAE, the PPO loss and the optimizer step
    compile: bool = False
    # on CUDA, replay each iteration as one CUDA graph (not with --compile or --target-kl)
    capture: bool = True

    # PPO
    num_steps: Count = 16  # rollout horizon per sub-env per iteration
    learning_rate: Rate = 2.5e-3  # Adam learning rate
    anneal_lr: bool = True  # anneal the learning rate linearly to 0 (--lr-schedule linear)
    # linear: --anneal-lr or constant; adaptive: rsl_rl's KL rule after each minibatch
    lr_schedule: Literal["linear", "adaptive"] = "linear"
    desired_kl: Rate = 0.01  # the KL per minibatch that --lr-schedule adaptive steers to
    gamma: Unit = 0.99  # discount factor
    gae_lambda: Unit = 0.95  # GAE lambda
    num_minibatches: Count = 8  # minibatches per epoch
    update_epochs: Count = 4  # epochs over each rollout
    norm_adv: bool = True  # normalize advantages per minibatch
    clip_coef: Rate = 0.2  # policy ratio clip
    clip_vloss: bool = False  # clip the value loss around the old values
    ent_coef: NonNeg = 0.0  # entropy bonus coefficient
    vf_coef: NonNeg = 0.5  # value loss coefficient
    max_grad_norm: Clip = 0.5  # global gradient-norm clip
    target_kl: float | None = None  # stop the epochs early above this approximate KL
    hidden: Layers = (64, 64)  # hidden layer sizes of actor and critic
    norm_obs: bool = False  # normalize observations with running statistics
    norm_reward: bool = False  # scale rewards by the running std of the discounted return
    init_log_std: float = 0.0  # initial log-std of the Gaussian policy (continuous actions)

    # H-term
    h_term_lambda: Unit = 0.01  # weight of the H-term loss
    h_term_gamma: Unit = 0.99  # discount of the log-probabilities accumulated along a window
    h_term_k_step: Count = 16  # window length K
    h_term_drop_rate: Unit = 0.125  # fraction of the stored episodes (lowest returns) left out
    h_term_batch: Count = 256  # windows per H-term update
    h_term_update_gap: Count = 1  # PPO iterations between H-term updates
    # steps of history kept per sub-env; an episode longer than this is never ranked
    # (0: the env's time limit, within 1,024 to 4,096)
    h_term_horizon: Count0 = 0
    h_term_max_episodes: Count = 4096  # episodes remembered in the store's table


# Massively parallel locomotion as in Rudin et al. 2021 (arXiv:2109.11978) and Brax's PPO, so that
# `--env Ant --num-envs 4096` needs no other flag on a GPU; lr 3e-4 annealed, not their KL-adaptive
# rate, which stalled lower on Ant (bench/NOTES.md#the-gpu-defaults-learning-rate)
# fmt: off
MUJOCO_DEFAULTS = dict(num_envs=4096, num_steps=16, num_minibatches=4, update_epochs=5,
                       learning_rate=3e-4, max_grad_norm=1.0, hidden=(256, 128, 64), norm_obs=True,
                       norm_reward=True, total_steps=50_000_000, eval_every=5_000_000,
                       save_every=5_000_000)
# On a CPU (and below 1024 envs on a GPU): a rollout that follows --num-envs (default_args,
# rollout_shape; at 64 envs the most env steps a second on one core)
MUJOCO_CPU_DEFAULTS = dict(MUJOCO_DEFAULTS, total_steps=5_000_000, eval_every=250_000,
                           save_every=1_000_000)
# Per-task rows over those (`--env X --help` lists them); initial std 0.37, not 1, on the CPU
# defaults; classic control's from bench/sweep.py (bench/NOTES.md#defaults-the-evidence)
TASK_DEFAULTS = {
    **{t: dict(init_log_std=-1.0) for t in ("Ant-v5", "HalfCheetah-v5", "Walker2d-v5")},
    # Hopper: a fall's cost reaches a short rollout only through the critic's value at its cut;
    # a larger value loss lets 256 envs' rollouts learn, and twice the rate steadies every N
    # (bench/NOTES.md#a-stable-solve)
    "Hopper-v5": dict(vf_coef=2.0, learning_rate=6e-4),
    "Pendulum-v1": dict(num_envs=64, num_steps=64, num_minibatches=32, update_epochs=5,
                        learning_rate=1e-3, gamma=0.9, norm_reward=True, total_steps=100_000),
    "MountainCarContinuous-v0": dict(num_envs=16, num_steps=64, num_minibatches=4, update_epochs=5,
                                     learning_rate=1e-3, norm_obs=True, norm_reward=True,
                                     total_steps=300_000),
    # Box2D (ppo_vec's rows): RL Zoo's settings (bench/experiments.py, group box2d), the rate
    # annealed on BipedalWalker (bench/NOTES.md#box2d-bipedalwalker), whose store keeps 2,048 steps
    # a sub-env: at the default 1,024 its 1,600-step episodes, the walks, are never selected
    "LunarLanderContinuous-v3": dict(num_envs=16, num_steps=1024, num_minibatches=256,
                                     update_epochs=4, learning_rate=3e-4, anneal_lr=False,
                                     gamma=0.999, gae_lambda=0.98, ent_coef=0.01,
                                     total_steps=1_000_000, eval_every=25_000, save_every=100_000),
    "BipedalWalker-v3": dict(num_envs=32, num_steps=2048, num_minibatches=1024, update_epochs=10,
                             learning_rate=3e-4, gamma=0.999, clip_coef=0.18,
                             norm_obs=True, norm_reward=True, total_steps=5_000_000,
                             eval_every=65_536, save_every=262_144, h_term_horizon=2048),
}
# fmt: on


def default_args(env_id: str, num_envs: int | None = None, device: str = "auto") -> Args:
    """`Args()`; for a batched MuJoCo task, with `MUJOCO_DEFAULTS` on a GPU at scale (`--num-envs`
    1024 or more, or none given), else `MUJOCO_CPU_DEFAULTS` with a rollout that follows
    `--num-envs` (about 4096 env steps, `rollout_shape`); then the task's own row."""
    import envs  # here, not at the top: a checkpoint's policy loads without the env package

    task = envs.mujoco_id(env_id)
    gpu = device.startswith("cuda") or device == "auto" and torch.cuda.is_available()
    big = gpu and (num_envs is None or num_envs >= 1024)
    cpu = {**MUJOCO_CPU_DEFAULTS, **rollout_shape(num_envs or 64)}
    scale = {} if task is None else MUJOCO_DEFAULTS if big else cpu
    return replace(Args(env=env_id), **{**scale, **TASK_DEFAULTS.get(task or env_id, {})})


def check_args(args: Args, env) -> None:  # (each field's own range: common.cli.check_ranges)
    check_single_agent(env, args.env, ALGO, groups=True, masks=True, flat=True, images=True)
    if args.num_envs * args.num_steps % args.num_minibatches:
        raise UserError(
            f"num_envs x num_steps is not divisible by --num-minibatches {args.num_minibatches}"
        )
    if args.h_term_drop_rate == 1.0:
        raise UserError("--h-term-drop-rate must be below 1 (1 drops every episode)")
    if 0 < args.h_term_horizon < args.h_term_k_step:
        raise UserError("--h-term-horizon must be 0 (the time limit) or at least --h-term-k-step")
    space = env.single_action_space
    if not isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.Box)):
        raise UserError(f"{ALGO} takes Discrete, MultiDiscrete and Box actions, not {space}")


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
    """Actor and critic over named observation groups: the actor reads `policy` (and
    `action_mask`), the critic `critic` (privileged state) where the env has it, else `policy`."""

    def __init__(self, obs_dim, action_space, hidden=(64, 64), init_log_std=0.0, critic_dim=0):
        super().__init__()
        self.critic_group = "critic" if critic_dim else "policy"
        self.nvec = Categoricals.nvec(action_space)  # categories per discrete dimension, or None
        self.discrete = self.nvec is not None
        self.multi = isinstance(action_space, gym.spaces.MultiDiscrete)
        out = sum(self.nvec) if self.discrete else int(np.prod(action_space.shape))
        # an image `policy` group (obs_dim: its space): one conv encoder under both heads
        layers, width = encoders.layers(obs_dim)
        self.encoder, self.image = nn.Sequential(*layers), bool(layers)
        self.critic = mlp([critic_dim or width, *hidden, 1], out_std=1.0)
        self.actor = mlp([width, *hidden, out], out_std=0.01)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((out,), float(init_log_std)))

    def encode(self, obs: dict) -> dict:
        """The groups as the heads read them: an image `policy` group as its conv features."""
        return type(obs)({**obs, "policy": self.encoder(obs["policy"])}) if self.image else obs

    def value(self, obs: dict, encoded: bool = False) -> torch.Tensor:
        obs = obs if encoded else self.encode(obs)
        return self.critic(obs[self.critic_group]).squeeze(-1)

    def dist(self, obs: dict, encoded: bool = False):
        obs = obs if encoded else self.encode(obs)
        out = self.actor(obs["policy"])
        if self.discrete:  # the env's action mask (if any): a forbidden action has probability 0
            return Categoricals(out, self.nvec, obs.get("action_mask"), self.multi)
        return Normal(out, self.log_std.exp().expand_as(out))

    def act(self, obs: dict):
        """Sample actions; return (action, log_prob, value)."""
        obs = self.encode(obs)
        d = self.dist(obs, encoded=True)
        # rsample: sample()'s numbers without its host sync on CUDA
        action = d.sample() if self.discrete else d.rsample()
        logp = d.log_prob(action) if self.discrete else d.log_prob(action).sum(-1)
        return action, logp, self.value(obs, encoded=True)

    def evaluate_actions(self, obs: dict, action: torch.Tensor):
        obs = self.encode(obs)
        d, value = self.dist(obs, encoded=True), self.value(obs, encoded=True)
        if self.discrete:
            return d.log_prob(action.long()), d.entropy(), value
        return d.log_prob(action).sum(-1), d.entropy().sum(-1), value

    def deterministic(self, obs: dict) -> torch.Tensor:
        obs = self.encode(obs)
        return self.dist(obs, encoded=True).mode() if self.discrete else self.actor(obs["policy"])


def ppo_loss(agent: Agent, args: Args, mb: Batch):
    """Clipped surrogate + value + entropy loss on one minibatch; (loss, named statistics)."""
    logp, entropy, value = agent.evaluate_actions(mb["obs"], mb["actions"])
    advantages, returns, old_values = mb["advantages"], mb["returns"], mb["values"]
    log_ratio = logp - mb["logp"]
    ratio = log_ratio.exp()
    if args.norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    clipped = ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = torch.max(-advantages * ratio, -advantages * clipped).mean()
    if args.clip_vloss:
        v_clipped = old_values + (value - old_values).clamp(-args.clip_coef, args.clip_coef)
        v_loss = 0.5 * torch.max((value - returns).square(), (v_clipped - returns).square()).mean()
    else:
        v_loss = 0.5 * (value - returns).square().mean()
    ent = entropy.mean()
    # (ent_coef 0: no entropy in the backward)
    loss = (pg_loss - args.ent_coef * ent if args.ent_coef else pg_loss) + args.vf_coef * v_loss
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clipfrac = ((ratio - 1).abs() > args.clip_coef).float().mean()
    stats = dict(
        pg_loss=pg_loss, v_loss=v_loss, entropy=ent, approx_kl=approx_kl, clipfrac=clipfrac
    )
    return loss, {k: v.detach() for k, v in stats.items()}


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


def h_term_loss(logp, mask, returns_norm, gamma: float, lam: float) -> torch.Tensor:
    """The H-term on `[B, K]` windows: H_b = sum_k gamma^k log pi(a_k|s_k) (masked past an episode's
    end), and loss = -lam * mean_b(H_b * normalized return of b's episode): the actor raises the
    discounted log-likelihood of good trajectories and lowers that of poor ones (a trajectory-level
    REINFORCE with a return baseline)."""
    discount = gamma ** torch.arange(logp.shape[1], device=logp.device, dtype=logp.dtype)
    return -lam * ((discount * logp * mask).sum(1) * returns_norm).mean()


def make_env(args: Args, device, seed: int):
    import envs  # here, not at the top: a checkpoint's policy loads without the env package

    env = envs.make(args.env, args.num_envs, device, seed, backend=args.mujoco_backend)
    norm = dict(norm_obs=args.norm_obs, norm_reward=args.norm_reward, gamma=args.gamma)
    return wrap_env(env, **norm, groups=True)


def main(args: Args) -> dict:
    run = Run(ALGO, args, defaults=default_args)  # device, --resume (with its settings), seeds
    args, device = run.args, run.device
    env = make_env(args, device, args.seed)
    check_args(args, env)
    act_space = env.single_action_space
    obs_dim, critic_dim = encoders.group_dims(env.single_observation_space)  # 0: no `critic` group
    net = dict(obs_dim=obs_dim, action_space=act_space, hidden=args.hidden, critic_dim=critic_dim)
    agent = Agent(**net, init_log_std=args.init_log_std).to(device)
    # the learning rate is a tensor that annealing fills in place, so that a compiled optimizer
    # step covers it (float64: a Python float's arithmetic); capturable: Adam's step stays on CUDA
    lr = torch.tensor(args.learning_rate, dtype=torch.float64, device=device)
    adam = dict(capturable=True) if device.type == "cuda" else dict(fused=device.type == "cpu")
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5, **adam)

    T, N = args.num_steps, args.num_envs
    batch_size = N * T
    num_iterations = args.total_steps // batch_size
    # where the next rollout starts, a fixed buffer as all state of the iteration; the storage
    next_obs = Batch(env.reset(seed=args.seed)[0]).clone()
    dtype = torch.long if agent.discrete else torch.float32
    a = torch.zeros((N, *act_space.shape), dtype=dtype, device=device)
    f = torch.zeros(N, device=device)
    store = Batch.zeros(T, obs=next_obs, final_obs=next_obs, actions=a, logp=f, values=f)
    store.update(Batch.zeros(T, rewards=f, dones=f, trunc=f))

    h_shapes = (next_obs, act_space.shape, dtype)  # the H-term's store of recent steps
    # an episode must fit the store whole to be ranked: by default it holds the env's time limit
    # (a limit past 4,096 steps is a guard, as MinAtar's 10,000, more than an episode's length)
    limit = getattr(env, "max_episode_steps", None) or 0
    horizon = args.h_term_horizon or min(max(1024, limit), 4096)
    h_store = TrajectoryStore(N, horizon, *h_shapes, args.h_term_max_episodes, device)
    h_time = loop_time = 0.0

    def opt_step():  # gradient clipping and the Adam step
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()

    act_fn, loss_fn = run.compile(agent.act), run.compile(ppo_loss)  # --compile, else as they are
    gae_fn, step_fn = run.compile(compute_gae), run.compile(opt_step, graphs=False)
    # the deployable policy: normalizer, actor, action scaling (common/policy.py)
    policy = Policy.of(agent, net | dict(init_log_std=args.init_log_std), env, act="deterministic")
    # the state a checkpoint holds and a resumed run restores, named once
    state = dict(model=agent, optimizer=optimizer, env=env, next_obs=next_obs, h_store=h_store)
    run.start(env, state, policy)
    guard, group = run.guard, optimizer.param_groups[0]  # (resumed: the loaded group)
    meter = run.meter("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac")

    def train_iteration():
        """A rollout of T steps from `next_obs`, GAE, the update: one iteration on fixed tensors."""
        # ---- rollout ----------------------------------------------------------------------------
        with torch.no_grad():
            obs = next_obs
            for t in range(T):
                action, logp, value = act_fn(obs)
                store[t] = dict(obs=obs, actions=action, logp=logp, values=value)
                obs, reward, terminated, truncated, info = env.step(action)
                done, trunc = terminated | truncated, truncated & ~terminated
                store[t] = dict(
                    rewards=reward, dones=done, trunc=trunc, final_obs=info["final_obs"]
                )
                h_store.add(store["obs"][t], action, reward, done)
            next_obs.copy_(obs)
            # bootstrap through time limits: r += gamma * V(final_obs) where truncated
            store["rewards"].add_(args.gamma * agent.value(store["final_obs"]) * store["trunc"])
            r, v, d = store["rewards"], store["values"], store["dones"]
            adv, ret = gae_fn(r, v, d, agent.value(next_obs), args.gamma, args.gae_lambda)

        # ---- update -----------------------------------------------------------------------------
        b = Batch({k: store[k] for k in ("obs", "actions", "logp", "values")})
        b = Batch(b, advantages=adv, returns=ret).flatten()
        for epoch in range(args.update_epochs):
            for mb in b.minibatches(args.num_minibatches):
                loss, stats = loss_fn(agent, args, mb)
                meter.add(**stats)
                guard.watch("PPO loss", loss)
                optimizer.zero_grad()
                loss.backward()
                if args.lr_schedule == "adaptive":  # on the device: no host sync
                    adapt_lr(group["lr"], stats["approx_kl"], args.desired_kl)
                step_fn()
                guard.watch_params("parameters", agent)
            # (a host sync, opt-in)
            if args.target_kl is not None and stats["approx_kl"] > args.target_kl:
                break

    # on CUDA one graph launch an iteration, not thousands of kernel launches;
    # the check before capture needs every piece of state the iteration writes
    capture = args.capture and not args.compile and args.target_kl is None
    # (the H-term's trajectory store too)
    iterate = run.capture(train_iteration, [env, guard, meter, optimizer, h_store], enabled=capture)

    def metrics():  # the learning rate; the H-term's share of the loop's host time
        return dict(lr=group["lr"], h_term_time_share=h_time / max(loop_time, 1e-9))

    iterations = run.iterations(num_iterations, batch_size, metrics=metrics)
    for iteration in iterations:
        t_iter = time.perf_counter()
        if args.anneal_lr and args.lr_schedule == "linear":
            group["lr"].fill_(args.learning_rate * (1.0 - iteration / num_iterations))
        iterate()

        # ---- H-term: an extra actor-only step on trajectory windows ----------------------------
        if (iteration + 1) % args.h_term_update_gap == 0:
            t_h = time.perf_counter()
            k, drop = args.h_term_k_step, args.h_term_drop_rate
            w_obs, w_act, w_mask, w_ret, _ = h_store.sample(args.h_term_batch, k, drop)
            logp = agent.evaluate_actions(w_obs.flatten(), w_act.flatten(0, 1))[0]
            logp = logp.reshape(w_mask.shape)
            h_loss = h_term_loss(logp, w_mask, w_ret, args.h_term_gamma, args.h_term_lambda)
            guard.watch("H-term loss", h_loss)
            optimizer.zero_grad()
            h_loss.backward()
            opt_step()  # (not step_fn: the H-term runs eager)
            guard.watch_params("parameters", agent)
            h_time += time.perf_counter() - t_h  # host time; on CUDA the work may still be queued
        loop_time += time.perf_counter() - t_iter
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: normalization, the
    deterministic actor, action rescaling), rebuilt without an env."""
    return Policy.restore(path, ALGO, Agent, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
