"""PPO-Clip with a Beta policy for continuous actions.

`algos/ppo_vec.py` with the Beta policy of Chou, Maturana and Scherer (2017, "Improving Stochastic
Policy Gradients in Continuous Control with Deep Reinforcement Learning using the Beta
Distribution", ICML): each action dimension is Beta(alpha, beta) on [0, 1], mapped to the action
range, with alpha, beta = softplus(actor output) + 1 (a unimodal density) read from the state.
A Gaussian's support is unbounded: every draw past a bound acts as the bound, so the gradient
follows the likelihood of an action the env never took (a bias, the paper's argument), and a mean
pushed past a bound gets no signal from the return to come back; the Beta's support is the action
range. Deterministic action: the mean.
Discrete actions are ppo_vec's categoricals.

    python algos/ppo_beta.py --env BipedalWalker-v3    # its TASK_DEFAULTS row
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from common.cli import Clip, Count, Layers, NonNeg, Rate, RunArgs, Unit, cli, rollout_shape, task_id
from common.distributions import Categoricals
from common import encoders
from common.errors import UserError
from common.optim import adapt_lr
from common.policy import Policy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent
from common.wrappers import wrap_env

ALGO = "ppo_beta"
PARENT, FAMILY = "ppo_vec", "PPO"  # its lineage (CONTRIBUTING.md)
EPS = 1e-6  # how close to a bound a Beta draw's log-density is taken


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
    # initial alpha = beta of every action dimension (> 1; near 1: near uniform over the range,
    # the start with which a probe found BipedalWalker's gait, bench/NOTES.md#box2d-bipedalwalker)
    init_concentration: float = 1.13


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
# Per-task rows over those (`--env X --help` lists them): ppo_vec's less its Gaussian's initial
# std (MuJoCo with this policy: one probe, in bench/NOTES.md); classic control's from bench/sweep.py
# (bench/NOTES.md#defaults-the-evidence)
TASK_DEFAULTS = {
    # Hopper: a fall's cost reaches a short rollout only through the critic's value at its cut;
    # a larger value loss lets 256 envs' rollouts learn, and twice the rate steadies every N
    # (bench/NOTES.md#a-stable-solve)
    "Hopper-v5": dict(vf_coef=2.0, learning_rate=6e-4),
    # raw observations: running statistics that keep moving as the solved policy narrows the
    # states it visits knocked solved runs down (bench/NOTES.md#a-stable-solve)
    "CartPole-v1": dict(num_envs=64, num_steps=4, num_minibatches=1, update_epochs=8,
                        learning_rate=5e-3, total_steps=300_000),
    "Pendulum-v1": dict(num_envs=64, num_steps=64, num_minibatches=32, update_epochs=5,
                        learning_rate=1e-3, gamma=0.9, norm_reward=True, total_steps=100_000),
    "MountainCarContinuous-v0": dict(num_envs=16, num_steps=64, num_minibatches=4, update_epochs=5,
                                     learning_rate=1e-3, norm_obs=True, norm_reward=True,
                                     total_steps=300_000),
    # pixels: the PQN paper's PPO baseline on MinAtar (its code's ppo_minatar config), one hidden
    # layer of 128 over MinAtar's conv stack
    **{f"MinAtar/{game}-v1": dict(num_envs=64, num_steps=128, num_minibatches=8, update_epochs=4,
                                  learning_rate=5e-3, ent_coef=1e-4, hidden=(128,),
                                  total_steps=10_000_000, eval_every=250_000, save_every=1_000_000)
       for game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")},
    # Box2D: RL Zoo's settings (bench/experiments.py, group box2d); BipedalWalker's rate annealed to
    # 0, not RL Zoo's constant one, under which the walker learned to walk and then fell again late
    # in the run (bench/NOTES.md#box2d-bipedalwalker)
    "LunarLanderContinuous-v3": dict(num_envs=16, num_steps=1024, num_minibatches=256,
                                     update_epochs=4, learning_rate=3e-4, anneal_lr=False,
                                     gamma=0.999, gae_lambda=0.98, ent_coef=0.01,
                                     total_steps=1_000_000, eval_every=25_000, save_every=100_000),
    "BipedalWalker-v3": dict(num_envs=32, num_steps=2048, num_minibatches=1024, update_epochs=10,
                             learning_rate=3e-4, gamma=0.999, clip_coef=0.18,
                             norm_obs=True, norm_reward=True, total_steps=5_000_000,
                             eval_every=65_536, save_every=262_144),
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
    return replace(Args(env=env_id), **{**scale, **TASK_DEFAULTS.get(task or task_id(env_id), {})})


def check_args(args: Args, env) -> None:  # (each field's own range: common.cli.check_ranges)
    check_single_agent(env, args.env, ALGO, groups=True, masks=True, flat=True, images=True)
    if args.num_envs * args.num_steps % args.num_minibatches:
        raise UserError(
            f"num_envs x num_steps is not divisible by --num-minibatches {args.num_minibatches}"
        )
    space = env.single_action_space
    if not isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.Box)):
        raise UserError(f"{ALGO} takes Discrete, MultiDiscrete and Box actions, not {space}")
    if not 1 < args.init_concentration < 1e6:
        raise UserError(
            f"--init-concentration must be in (1, 1e6) (alpha, beta = softplus + 1), got "
            f"{args.init_concentration}; 1.01 is near uniform over the action range"
        )


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


class Beta:
    """Independent Beta(alpha, beta) per action dimension, alpha and beta softplus(x) + 1 of the
    actor's output x = [x_alpha, x_beta]; actions are the draws mapped from [0, 1] to [-1, 1]."""

    def __init__(self, out: torch.Tensor):
        x_alpha, x_beta = out.chunk(2, -1)
        self.alpha, self.beta = F.softplus(x_alpha) + 1, F.softplus(x_beta) + 1
        # (no argument validation: its checks would wait for the device)
        self.d = torch.distributions.Beta(self.alpha, self.beta, validate_args=False)

    def sample(self) -> torch.Tensor:
        return self.d.sample() * 2 - 1

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        # a float32 draw can round to 0 or 1, where the density's log is not finite
        return self.d.log_prob(((action + 1) / 2).clamp(EPS, 1 - EPS))

    def entropy(self) -> torch.Tensor:
        return self.d.entropy()

    def mean(self) -> torch.Tensor:
        return self.alpha / (self.alpha + self.beta) * 2 - 1


class Agent(nn.Module):
    """Actor and critic over named observation groups: the actor reads `policy` (and
    `action_mask`), the critic `critic` (privileged state) where the env has it, else `policy`."""

    def __init__(
        self, obs_dim, action_space, hidden=(64, 64), init_concentration=1.13, critic_dim=0
    ):
        super().__init__()
        self.critic_group = "critic" if critic_dim else "policy"
        self.nvec = Categoricals.nvec(action_space)  # categories per discrete dimension, or None
        self.discrete = self.nvec is not None
        self.multi = isinstance(action_space, gym.spaces.MultiDiscrete)
        # a continuous action's (alpha, beta) per dimension
        out = sum(self.nvec) if self.discrete else 2 * int(np.prod(action_space.shape))
        # an image `policy` group (obs_dim: its space): one conv encoder under both heads
        layers, width = encoders.layers(obs_dim)
        self.encoder, self.image = nn.Sequential(*layers), bool(layers)
        self.critic = mlp([critic_dim or width, *hidden, 1], out_std=1.0)
        self.actor = mlp([width, *hidden, out], out_std=0.01)
        if not self.discrete:  # alpha = beta = init_concentration: softplus(bias) + 1
            y = init_concentration - 1  # softplus's inverse, written so that a large y stays finite
            nn.init.constant_(self.actor[-1].bias, y + math.log(-math.expm1(-y)))

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
        return Beta(out)

    def act(self, obs: dict):
        """Sample actions; return (action, log_prob, value)."""
        obs = self.encode(obs)
        d = self.dist(obs, encoded=True)
        action = d.sample()
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
        d = self.dist(obs, encoded=True)
        return d.mode() if self.discrete else d.mean()


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
    agent = Agent(**net, init_concentration=args.init_concentration).to(device)
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

    def opt_step():  # gradient clipping and the Adam step
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()

    act_fn, loss_fn = run.compile(agent.act), run.compile(ppo_loss)  # --compile, else as they are
    gae_fn, step_fn = run.compile(compute_gae), run.compile(opt_step, graphs=False)
    # the deployable policy: normalizer, actor, action scaling (common/policy.py)
    spec = net | dict(init_concentration=args.init_concentration)
    policy = Policy.of(agent, spec, env, act="deterministic")
    # the state a checkpoint holds and a resumed run restores, named once
    run.start(env, dict(model=agent, optimizer=optimizer, env=env, next_obs=next_obs), policy)
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
    iterate = run.capture(train_iteration, [env, guard, meter, optimizer], enabled=capture)
    iterations = run.iterations(num_iterations, batch_size, metrics=lambda: dict(lr=group["lr"]))
    for iteration in iterations:
        if args.anneal_lr and args.lr_schedule == "linear":
            group["lr"].fill_(args.learning_rate * (1.0 - iteration / num_iterations))
        iterate()
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: normalization, the
    deterministic actor, action rescaling), rebuilt without an env."""
    return Policy.restore(path, ALGO, Agent, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
