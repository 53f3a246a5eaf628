"""Recurrent PPO: ppo_vec with a GRU memory in front of the actor and of the critic, for
partially observed tasks (velocities not observed, noisy sensors, hidden goals) where a memoryless
policy fails.

The PPO-Clip + GAE of `algos/ppo_vec.py` (Schulman et al., 2017, arXiv:1707.06347), each network
reading the output of its own GRU (Cho et al., 2014, arXiv:1406.1078) instead of the observation:
* the hidden state is carried through the rollout, one row per sub-env, and zeroed where an episode
  ends (the env has already reset that sub-env: the next observation is the new episode's first);
* the update replays each sub-env's rollout as a sequence from the hidden state it started with
  (truncated backpropagation through time over `--num-steps`), zeroing it at the same episode
  starts; minibatches are whole sub-env sequences (`--num-envs` / `--num-minibatches` each);
* the hidden state is in the checkpoint (exact resume), and `load_policy` returns a stateful policy
  (`common.policy.RecurrentPolicyFn`): `policy.reset()` before new episodes, `policy.reset(done)`
  to forget the sub-envs of a vec env that start over.
A GRU, not an LSTM: one state tensor (simpler to carry, reset and save), on par with the LSTM in
Chung et al. (2014, arXiv:1412.3555). The rest (truncation bootstrap, value clipping, schedules,
action masks, an image group's conv encoder) is ppo_vec's.

    # CartPole without velocities (bench/NOTES.md#defaults-the-evidence)
    python algos/ppo_rnn.py --env CartPoleNoVel-v0 --num-envs 64 --num-steps 32 \
        --num-minibatches 4 --learning-rate 1e-3 --norm-obs --total-steps 200000
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

from common.cli import Clip, Count, Layers, NonNeg, Rate, RunArgs, Unit, cli, rollout_shape
from common.distributions import Categoricals, Normal
from common import encoders
from common.errors import UserError
from common.optim import adapt_lr
from common.policy import RecurrentPolicy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent
from common.wrappers import wrap_env

ALGO = "ppo_rnn"
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
    hidden: Layers = (64, 64)  # hidden layer sizes of actor and critic (after their GRUs)
    rnn_hidden: Count = 64  # size of the GRU state of actor and of critic
    norm_obs: bool = False  # normalize observations with running statistics
    norm_reward: bool = False  # scale rewards by the running std of the discounted return
    init_log_std: float = 0.0  # initial log-std of the Gaussian policy (continuous actions)


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
    # 8 epochs, not 4: fewer solved runs fall back (bench/NOTES.md#a-stable-solve)
    "CartPole-v1": dict(num_envs=64, num_steps=4, num_minibatches=1, update_epochs=8,
                        learning_rate=5e-3, norm_obs=True, total_steps=300_000),
    # 32 envs: the dataclass's 1024 finish no episode of this task in a useful number of steps
    "Acrobot-v1": dict(num_envs=32, num_steps=16, num_minibatches=1, learning_rate=1e-3,
                       ent_coef=0.01, total_steps=300_000),
    "Pendulum-v1": dict(num_envs=64, num_steps=64, num_minibatches=8, update_epochs=10,
                        learning_rate=1e-3, gamma=0.9, norm_reward=True, total_steps=100_000),
    "MountainCarContinuous-v0": dict(num_envs=16, num_steps=64, num_minibatches=4, update_epochs=5,
                                     learning_rate=1e-3, norm_obs=True, norm_reward=True,
                                     total_steps=300_000),
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
    cpu = {**MUJOCO_CPU_DEFAULTS, **rollout_shape(num_envs or 64, sequences=True)}
    scale = {} if task is None else MUJOCO_DEFAULTS if big else cpu
    return replace(Args(env=env_id), **{**scale, **TASK_DEFAULTS.get(task or env_id, {})})


def check_args(args: Args, env) -> None:  # (each field's own range: common.cli.check_ranges)
    check_single_agent(env, args.env, ALGO, groups=True, masks=True, flat=True, images=True)
    n, mb = args.num_envs, args.num_minibatches  # minibatches are whole sub-env sequences
    if n % mb:
        raise UserError(f"--num-envs {n} is not divisible by --num-minibatches {mb}")
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

    def __init__(
        self, obs_dim, action_space, hidden=(64, 64), init_log_std=0.0, critic_dim=0, rnn_hidden=64
    ):
        super().__init__()
        self.critic_group = "critic" if critic_dim else "policy"
        self.nvec = Categoricals.nvec(action_space)  # categories per discrete dimension, or None
        self.discrete = self.nvec is not None
        self.multi = isinstance(action_space, gym.spaces.MultiDiscrete)
        out = sum(self.nvec) if self.discrete else int(np.prod(action_space.shape))
        # an image `policy` group (obs_dim: its space): one conv encoder under both GRUs
        layers, width = encoders.layers(obs_dim)
        self.encoder, self.image = nn.Sequential(*layers), bool(layers)
        # the hidden state h: [2, batch, rnn_hidden], the actor's GRU then the critic's
        self.rnn_hidden = rnn_hidden
        self.actor_rnn = nn.GRUCell(width, rnn_hidden)
        self.critic_rnn = nn.GRUCell(critic_dim or width, rnn_hidden)
        self.critic = mlp([rnn_hidden, *hidden, 1], out_std=1.0)
        self.actor = mlp([rnn_hidden, *hidden, out], out_std=0.01)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((out,), float(init_log_std)))

    def initial_state(self, n: int, device) -> torch.Tensor:
        return torch.zeros(2, n, self.rnn_hidden, device=device)

    def encode(self, obs: dict) -> dict:  # an image `policy` group as its conv features
        return type(obs)({**obs, "policy": self.encoder(obs["policy"])}) if self.image else obs

    def memory(self, obs: dict, h: torch.Tensor) -> torch.Tensor:
        """One step of both GRUs: the hidden state after seeing `obs` (encoded groups [B, ...])."""
        return torch.stack([self.actor_rnn(obs["policy"], h[0]), self.critic_memory(obs, h[1])])

    def critic_memory(self, obs: dict, hc: torch.Tensor) -> torch.Tensor:
        return self.critic_rnn(obs[self.critic_group], hc)

    def value(self, obs: dict, h: torch.Tensor) -> torch.Tensor:
        """V(obs) from the critic's state before `obs` (the state itself is not advanced)."""
        return self.critic(self.critic_memory(self.encode(obs), h[1])).squeeze(-1)

    def dist(self, features: torch.Tensor, obs: dict):
        out = self.actor(features)
        if self.discrete:  # the env's action mask (if any): a forbidden action has probability 0
            return Categoricals(out, self.nvec, obs.get("action_mask"), self.multi)
        return Normal(out, self.log_std.exp().expand_as(out))

    def act(self, obs: dict, h: torch.Tensor):
        """Sample actions; return (action, log_prob, value, next hidden state)."""
        h = self.memory(self.encode(obs), h)
        d = self.dist(h[0], obs)
        # rsample: sample()'s numbers without its host sync on CUDA
        action = d.sample() if self.discrete else d.rsample()
        logp = d.log_prob(action) if self.discrete else d.log_prob(action).sum(-1)
        return action, logp, self.critic(h[1]).squeeze(-1), h

    def unroll(self, obs: Batch, starts: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Both GRUs over sequences `obs` [T, B, ...] from state `h`, zeroed where `starts` [T, B]
        marks an episode's first step; the states after each step [2, T, B, rnn_hidden]."""
        out, obs = [], self.encode(obs)  # the whole sequence through the encoder at once
        for t in range(starts.shape[0]):
            h = self.memory(obs[t], h * (1.0 - starts[t]).unsqueeze(-1))
            out.append(h)
        return torch.stack(out, 1)

    def evaluate_actions(self, obs: Batch, action: torch.Tensor, starts, h0):
        f = self.unroll(obs, starts, h0)
        d, value = self.dist(f[0], obs), self.critic(f[1]).squeeze(-1)
        if self.discrete:
            return d.log_prob(action.long()), d.entropy(), value
        return d.log_prob(action).sum(-1), d.entropy().sum(-1), value

    def deterministic(self, obs: dict, h_actor: torch.Tensor):
        """The deployed policy: the actor's GRU and head only (its state [B, rnn_hidden])."""
        h_actor = self.actor_rnn(self.encode(obs)["policy"], h_actor)
        return (self.dist(h_actor, obs).mode() if self.discrete else self.actor(h_actor)), h_actor


def ppo_loss(agent: Agent, args: Args, mb: Batch, h0: torch.Tensor):
    """Clipped surrogate + value + entropy loss on one minibatch of [T, B] sequences; (loss, named
    statistics)."""
    logp, entropy, value = agent.evaluate_actions(mb["obs"], mb["actions"], mb["starts"], h0)
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
    net["rnn_hidden"] = args.rnn_hidden  # the size of the GRUs' state
    agent = Agent(**net, init_log_std=args.init_log_std).to(device)
    # the learning rate is a tensor that annealing fills in place, so that a compiled optimizer
    # step covers it (float64: a Python float's arithmetic); capturable: Adam's step stays on CUDA
    lr = torch.tensor(args.learning_rate, dtype=torch.float64, device=device)
    adam = dict(capturable=device.type == "cuda")
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5, **adam)

    T, N = args.num_steps, args.num_envs
    batch_size = N * T
    envs_per_minibatch = N // args.num_minibatches  # minibatches of whole sub-env sequences
    num_iterations = args.total_steps // batch_size
    # where the next rollout starts, a fixed buffer as all state of the iteration; the storage
    next_obs = Batch(env.reset(seed=args.seed)[0]).clone()
    dtype = torch.long if agent.discrete else torch.float32
    a = torch.zeros((N, *act_space.shape), dtype=dtype, device=device)
    f = torch.zeros(N, device=device)
    store = Batch.zeros(T, obs=next_obs, final_obs=next_obs, actions=a, logp=f, values=f)
    critic_h = torch.zeros(N, args.rnn_hidden, device=device)  # the critic's state after a step
    store.update(Batch.zeros(T, rewards=f, dones=f, trunc=f, critic_h=critic_h))

    def opt_step():  # gradient clipping and the Adam step
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()

    act_fn, loss_fn = run.compile(agent.act), run.compile(ppo_loss)  # --compile, else as they are
    gae_fn, step_fn = run.compile(compute_gae), run.compile(opt_step, graphs=False)
    hidden = agent.initial_state(N, device)  # the memory the next rollout starts with
    # the deployable policy: normalizer, actor, action scaling (common/policy.py)
    spec = net | dict(init_log_std=args.init_log_std)
    policy = RecurrentPolicy.of(agent, spec, env, act="deterministic")
    # the state a checkpoint holds and a resumed run restores, named once
    state = dict(model=agent, optimizer=optimizer, env=env, next_obs=next_obs, hidden=hidden)
    run.start(env, state, policy)
    guard, group = run.guard, optimizer.param_groups[0]  # (resumed: the loaded group)
    meter = run.meter("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac")

    def train_iteration():
        """A rollout of T steps from `next_obs` and `hidden`, GAE, then the epochs of minibatch
        updates over whole sub-env sequences, all on fixed tensors."""
        # ---- rollout ----------------------------------------------------------------------------
        h_start = hidden.clone()  # the update replays each sub-env's sequence from here
        with torch.no_grad():
            obs, h = next_obs, h_start
            for t in range(T):
                action, logp, value, h = act_fn(obs, h)
                store[t] = dict(obs=obs, actions=action, logp=logp, values=value, critic_h=h[1])
                obs, reward, terminated, truncated, info = env.step(action)
                done, trunc = terminated | truncated, truncated & ~terminated
                store[t] = dict(
                    rewards=reward, dones=done, trunc=trunc, final_obs=info["final_obs"]
                )
                # a new episode starts with a blank memory
                h = h * (1.0 - store["dones"][t]).unsqueeze(-1)
            next_obs.copy_(obs)
            hidden.copy_(h)
            # bootstrap through time limits: r += gamma * V(final_obs) where truncated, V from the
            # critic's state after the step
            final = agent.encode(store["final_obs"].flatten())
            hc = agent.critic_memory(final, store["critic_h"].flatten(0, 1))
            final_v = agent.critic(hc).view(T, N)
            store["rewards"].add_(args.gamma * final_v * store["trunc"])
            r, v, d = store["rewards"], store["values"], store["dones"]
            adv, ret = gae_fn(r, v, d, agent.value(next_obs, hidden), args.gamma, args.gae_lambda)
            starts = torch.cat([torch.zeros_like(d[:1]), d[:-1]])  # step t begins an episode

        # ---- update -----------------------------------------------------------------------------
        b = Batch({k: store[k] for k in ("obs", "actions", "logp", "values")})
        b = Batch(b, advantages=adv, returns=ret, starts=starts)
        for epoch in range(args.update_epochs):
            perm = torch.randperm(N, device=device)  # minibatches of whole sub-env sequences
            for start in range(0, N, envs_per_minibatch):
                idx = perm[start : start + envs_per_minibatch]
                loss, stats = loss_fn(agent, args, b[:, idx], h_start[:, idx])
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
    iterate = run.capture(train_iteration, [env, guard, meter, optimizer], enabled=capture)
    iterations = run.iterations(num_iterations, batch_size, metrics=lambda: dict(lr=group["lr"]))
    for iteration in iterations:
        if args.anneal_lr and args.lr_schedule == "linear":
            group["lr"].fill_(args.learning_rate * (1.0 - iteration / num_iterations))
        iterate()
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: normalization, the
    actor's GRU and head, action rescaling), rebuilt without an env. It remembers each batch row's
    hidden state between calls: `policy.reset()` before new episodes, `policy.reset(done)` to forget
    the rows whose episode ended (a batch of another size starts blank)."""
    return RecurrentPolicy.restore(path, ALGO, Agent, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
