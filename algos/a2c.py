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

from common.cli import Clip, Count, Count0, Layers, NonNeg, Rate, RunArgs, Unit, cli, rollout_shape
from common.distributions import Categoricals, Normal
from common import encoders
from common.errors import UserError
from common.policy import Policy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent
from common.wrappers import wrap_env

ALGO = "a2c"
PARENT, FAMILY = "ppo_vec", "PPO"  # its lineage (CONTRIBUTING.md)


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    num_envs: int = 8  # number of parallel sub-environments
    total_steps: Count = 300_000  # total environment steps (summed over sub-envs)
    eval_every: Count0 = 50_000  # evaluate the policy every this many env steps (0: at the end)
    save_every: Count0 = 100_000  # write the checkpoint every this many env steps (0: at the end)
    # torch.compile the policy step, GAE, the A2C loss and the optimizer step
    compile: bool = False
    # on CUDA, replay each iteration as one CUDA graph (not with --compile)
    capture: bool = True

    # A2C
    num_steps: Count = 5  # rollout horizon per sub-env per iteration
    learning_rate: Rate = 7e-4  # Adam learning rate
    anneal_lr: bool = True  # anneal the learning rate linearly to 0
    gamma: Unit = 0.99  # discount factor
    gae_lambda: Unit = 1.0  # GAE lambda
    norm_adv: bool = False  # normalize advantages over the batch
    ent_coef: NonNeg = 0.0  # entropy bonus coefficient
    vf_coef: NonNeg = 0.5  # value loss coefficient
    max_grad_norm: Clip = 0.5  # global gradient-norm clip
    hidden: Layers = (64, 64)  # hidden layer sizes of actor and critic
    norm_obs: bool = False  # normalize observations with running statistics
    norm_reward: bool = False  # scale rewards by the running std of the discounted return
    init_log_std: float = 0.0  # initial log-std of the Gaussian policy (continuous actions)


# ppo_vec's massively parallel locomotion defaults (many envs, short horizon, normalized
# observations and rewards) for the batched MuJoCo tasks, one large-batch A2C step per rollout (not
# tuned on MuJoCo).
# fmt: off
MUJOCO_DEFAULTS = dict(num_envs=4096, num_steps=16, learning_rate=3e-4, max_grad_norm=1.0,
                       hidden=(256, 128, 64), norm_obs=True, norm_reward=True,
                       total_steps=50_000_000, eval_every=5_000_000, save_every=5_000_000)
# On a CPU (and below 1024 envs on a GPU): ppo_vec's CPU shape (not tuned on MuJoCo either); the
# rollout follows --num-envs (default_args)
MUJOCO_CPU_DEFAULTS = dict(MUJOCO_DEFAULTS, total_steps=5_000_000, eval_every=250_000,
                           save_every=1_000_000)
# Per-task rows over those (`--env X --help` lists them); initial std 0.37, not 1, on the CPU
# defaults; classic control's from bench/sweep.py (bench/NOTES.md#defaults-the-evidence)
TASK_DEFAULTS = {
    **{t: dict(init_log_std=-1.0) for t in ("Ant-v5", "HalfCheetah-v5", "Walker2d-v5")},
    "CartPole-v1": dict(learning_rate=3e-3),
    "Pendulum-v1": dict(num_envs=16, num_steps=8, learning_rate=3e-3, gamma=0.9, gae_lambda=0.95,
                        norm_reward=True, norm_adv=True, total_steps=400_000),
    "MountainCarContinuous-v0": dict(num_envs=16, num_steps=64, learning_rate=1e-3, norm_obs=True,
                                     norm_reward=True, total_steps=300_000),
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
    cpu = {**MUJOCO_CPU_DEFAULTS, **rollout_shape(num_envs or 64, minibatch=None)}
    scale = {} if task is None else MUJOCO_DEFAULTS if big else cpu
    return replace(Args(env=env_id), **{**scale, **TASK_DEFAULTS.get(task or env_id, {})})


def check_args(args: Args, env) -> None:  # (each field's own range: common.cli.check_ranges)
    check_single_agent(env, args.env, ALGO, groups=True, masks=True, flat=True, images=True)
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


def a2c_loss(agent: Agent, args: Args, b: Batch):
    """Policy-gradient + value + entropy loss on the whole rollout; (loss, named statistics)."""
    logp, entropy, value = agent.evaluate_actions(b["obs"], b["actions"])
    advantages, returns = b["advantages"], b["returns"]
    if args.norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss = -(advantages * logp).mean()
    v_loss = 0.5 * (value - returns).square().mean()
    ent = entropy.mean()
    # (ent_coef 0: no entropy in the backward)
    loss = (pg_loss - args.ent_coef * ent if args.ent_coef else pg_loss) + args.vf_coef * v_loss
    stats = dict(pg_loss=pg_loss, v_loss=v_loss, entropy=ent)
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
    agent = Agent(**net, init_log_std=args.init_log_std).to(device)
    # the learning rate is a tensor that annealing fills in place, so that a compiled optimizer
    # step covers it (float64: a Python float's arithmetic); capturable: Adam's step stays on CUDA
    lr = torch.tensor(args.learning_rate, dtype=torch.float64, device=device)
    adam = dict(capturable=device.type == "cuda")
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5, **adam)

    T, N = args.num_steps, args.num_envs
    batch_size = N * T
    num_iterations = args.total_steps // batch_size
    # where the next rollout starts, a fixed buffer as all state of the iteration; the storage
    next_obs = Batch(env.reset(seed=args.seed)[0]).clone()
    dtype = torch.long if agent.discrete else torch.float32
    a = torch.zeros((N, *act_space.shape), dtype=dtype, device=device)
    f = torch.zeros(N, device=device)
    store = Batch.zeros(T, obs=next_obs, final_obs=next_obs, actions=a, values=f)
    store.update(Batch.zeros(T, rewards=f, dones=f, trunc=f))

    def opt_step():  # gradient clipping and the Adam step
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()

    act_fn, loss_fn = run.compile(agent.act), run.compile(a2c_loss)  # --compile, else as they are
    gae_fn, step_fn = run.compile(compute_gae), run.compile(opt_step, graphs=False)
    # the deployable policy: normalizer, actor, action scaling (common/policy.py)
    policy = Policy.of(agent, net | dict(init_log_std=args.init_log_std), env, act="deterministic")
    # the state a checkpoint holds and a resumed run restores, named once
    run.start(env, dict(model=agent, optimizer=optimizer, env=env, next_obs=next_obs), policy)
    guard, group = run.guard, optimizer.param_groups[0]  # (resumed: the loaded group)
    meter = run.meter("pg_loss", "v_loss", "entropy")

    def train_iteration():
        """A rollout of T steps from `next_obs`, GAE, the update: one iteration on fixed tensors."""
        # ---- rollout ----------------------------------------------------------------------------
        with torch.no_grad():
            obs = next_obs
            for t in range(T):
                action, logp, value = act_fn(obs)
                store[t] = dict(obs=obs, actions=action, values=value)
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
        b = Batch({k: store[k] for k in ("obs", "actions")})
        b = Batch(b, advantages=adv, returns=ret).flatten()
        loss, stats = loss_fn(agent, args, b)
        meter.add(**stats)
        guard.watch("A2C loss", loss)
        optimizer.zero_grad()
        loss.backward()
        step_fn()
        guard.watch_params("parameters", agent)

    # on CUDA one graph launch an iteration, not thousands of kernel launches;
    # the check before capture needs every piece of state the iteration writes
    capture = args.capture and not args.compile
    iterate = run.capture(train_iteration, [env, guard, meter, optimizer], enabled=capture)
    iterations = run.iterations(num_iterations, batch_size, metrics=lambda: dict(lr=group["lr"]))
    for iteration in iterations:
        if args.anneal_lr:
            group["lr"].fill_(args.learning_rate * (1.0 - iteration / num_iterations))
        iterate()
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: normalization, the
    deterministic actor, action rescaling), rebuilt without an env."""
    return Policy.restore(path, ALGO, Agent, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
