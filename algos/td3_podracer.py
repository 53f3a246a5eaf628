"""TD3 with the ElegantRL-Podracer parallelism: `algos/td3.py` plus pipelining and torchrun.

The algorithm is `algos/td3.py`'s, unchanged (`diff -w algos/td3.py algos/td3_podracer.py` shows only
the parallelism below); with neither feature on, a run is the same run as `algos/td3.py`'s.

* `--pipeline`: pipeline parallelism. Exploring and learning overlap in lockstep segments of
  `--pipeline-segment` vectorized steps: an explorer thread steps the envs with a copy of the actor
  (and its own `torch.Generator` for the exploration noise) while the learner runs the updates owed
  for the previous segment's steps on the buffer as it was when the segment began. At the handoff
  the new transitions enter the buffer and the learner's actor is copied to the explorer, so the
  explorer's actor lags the learner by one segment and the learner's updates lag the data by one
  segment (the last segment's are run after it). Same seed, same result, however the threads
  interleave; the update count is the one without `--pipeline`.
* `torchrun`: one learner per process, each with its own envs and replay buffer; the actors, the
  critics and their Adam moments are averaged across ranks every `--fuse-every` updates (model
  fusion; 0: gradient all-reduce), observation statistics are pooled. Only rank 0 logs, evaluates
  and checkpoints.

    python algos/td3_podracer.py --env Pendulum-v1
    python algos/td3_podracer.py --env Pendulum-v1 --pipeline
    torchrun --nproc-per-node 2 algos/td3_podracer.py --env Pendulum-v1
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from common import distributed
from common.buffers import PrioritizedReplayBuffer, ReplayBuffer
from common.cli import Count, Count0, Layers, NonNeg, Rate, RunArgs, Unit, cli
from common.device import compile_fn, resolve_device
from common.ensemble import EnsembleMLP
from common.errors import UserError
from common.logger import Meter
from common.noise import ColoredNoise
from common.pipeline import Pipeline, flush
from common.policy import Policy
from common.run import Run
from common.vec_env import check_single_agent
from common.wrappers import NormalizeObservation, find_wrapper, wrap_env

ALGO = "td3_podracer"


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    env: str = "Pendulum-v1"
    """environment id with a Box action space (torch-native or any gymnasium id)"""
    num_envs: int = 4
    total_steps: Count = 40_000
    """total environment steps (summed over sub-envs and, under torchrun, over ranks)"""
    eval_every: Count0 = 10_000
    save_every: Count0 = 20_000
    compile: bool = False
    """torch.compile the critic and actor losses (forward and backward) and the policy step (on CUDA: CUDA graphs,
    the optimizer steps' excepted)"""

    # TD3
    buffer_size: Count = 1_000_000
    """replay buffer capacity (transitions)"""
    batch_size: Count = 256
    """minibatch size of each update"""
    actor_lr: Rate = 1e-3
    """Adam learning rate of the actor"""
    critic_lr: Rate = 1e-3
    """Adam learning rate of the critic"""
    gamma: Unit = 0.99
    """discount factor"""
    tau: Unit = 0.005
    """target networks' Polyak rate"""
    exploration_noise: NonNeg = 0.1
    """std of the Gaussian exploration noise (actions in [-1, 1])"""
    noise_color: float = 0.0
    """exploration noise color beta (common/noise.py): 0 white (i.i.d. each step), 1 pink, 2 red; correlated
    noise wanders further, which tasks with a distant reward need (MountainCarContinuous)"""
    policy_delay: Count = 2
    """critic updates per actor (and target) update"""
    target_noise: NonNeg = 0.2
    """std of the target policy smoothing noise"""
    noise_clip: NonNeg = 0.5
    """clip of the target policy smoothing noise"""
    learning_starts: Count0 = 2_000
    """environment steps (all ranks) of uniformly random actions before learning"""
    gradient_steps: Count = 4
    """updates after each vectorized step (update-to-data ratio = gradient_steps / num_envs)"""
    hidden: Layers = (256, 256)
    """hidden layer sizes of actor and critic"""
    norm_obs: bool = False
    """normalize observations with running statistics (saved in the checkpoint)"""
    per: bool = False
    """proportional prioritized experience replay"""
    per_alpha: Unit = 0.6
    """PER priority exponent"""
    per_beta: Unit = 0.4
    """PER initial importance-sampling exponent (annealed to 1)"""

    # parallelism
    pipeline: bool = False
    """pipeline parallelism: explore the next segment in a thread while learning from the previous one"""
    pipeline_segment: int = 16
    """vectorized steps per pipeline segment; the explorer's actor is refreshed after each"""
    fuse_every: Count0 = 1
    """under torchrun: average actors, critics and their Adam moments across ranks every this many
    updates (model fusion); 0: average the gradients before every optimizer step instead"""


# Per-task defaults over the ones above: the settings a held-out sweep chose for a task (bench/sweep.py: tuned on
# seeds 101-103, reported on seeds 1-5; bench/results/sweeps/). `--env X --help` lists the task's defaults.
TASK_DEFAULTS: dict[str, dict] = {
    # td3's Pendulum-v1 row, checked on this file (bench/README.md#defaults-the-evidence)
    "Pendulum-v1": dict(hidden=(64, 64), learning_starts=1_000, total_steps=20_000, tau=0.05, actor_lr=3e-3,
                        critic_lr=3e-3),
    # td3's MountainCarContinuous-v0 row (pink exploration noise), checked on this
    # file (bench/README.md#defaults-the-evidence)
    "MountainCarContinuous-v0": dict(hidden=(64, 64), noise_color=1.0, exploration_noise=0.5, total_steps=50_000),
}


def default_args(env_id: str, num_envs: int | None = None, device: str = "auto") -> Args:
    """The defaults for a task: `Args()` with the task's row of `TASK_DEFAULTS`, if it has one."""
    return replace(Args(env=env_id), **TASK_DEFAULTS.get(env_id, {}))


def check_args(args: Args, env) -> None:
    check_single_agent(env, args.env, ALGO)
    if not isinstance(env.single_action_space, gym.spaces.Box):
        raise UserError(
            f"{ALGO} needs a continuous (Box) action space; {args.env} has {env.single_action_space}. "
            f"Use a discrete-action algorithm (algos/dqn.py, algos/ppo_vec.py) for this env."
        )
    if len(env.single_observation_space.shape) != 1:
        raise UserError(f"{ALGO}'s MLPs need flat observations, {args.env} has shape "
                         f"{env.single_observation_space.shape}; flatten them in the env")
    if args.batch_size <= 0 or args.gradient_steps <= 0 or args.policy_delay <= 0:
        raise UserError("--batch-size, --gradient-steps and --policy-delay must be positive")
    if args.buffer_size < args.num_envs:
        raise UserError(f"--buffer-size {args.buffer_size} must hold at least one vectorized step ({args.num_envs})")
    if not 0.0 < args.tau <= 1.0:
        raise UserError(f"--tau must be in (0, 1], got {args.tau}")
    if args.learning_starts >= args.total_steps:
        raise UserError(f"--learning-starts {args.learning_starts} >= --total-steps {args.total_steps}: nothing would be learned")
    if args.pipeline_segment <= 0 or args.fuse_every < 0:
        raise UserError(f"--pipeline-segment must be positive and --fuse-every >= 0, got {args.pipeline_segment} "
                         f"and {args.fuse_every}")


class Actor(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden=(256, 256)):
        super().__init__()
        sizes, layers = [obs_dim, *hidden], []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers += [nn.Linear(sizes[-1], act_dim), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class Critic(nn.Module):
    """K independent Q(s, a) heads evaluated in one call: returns `[K, B]`."""

    def __init__(self, obs_dim: int, act_dim: int, hidden=(256, 256), num_critics: int = 2):
        super().__init__()
        self.q = EnsembleMLP(num_critics, obs_dim + act_dim, hidden, 1)

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self.q(torch.cat([obs, act], -1)).squeeze(-1)


def critic_loss(actor_t: Actor, critic: Critic, critic_t: Critic, gamma: float, b, target_noise: float, noise_clip: float):
    """Importance-weighted squared TD error of both critics against
    r + gamma * (1 - terminated) * min_k Q'_k(s', clip(mu'(s') + clip(noise)))."""
    with torch.no_grad():
        noise = (torch.randn_like(b.actions) * target_noise).clamp(-noise_clip, noise_clip)
        next_act = (actor_t(b.next_obs) + noise).clamp(-1.0, 1.0)
        next_q = critic_t(b.next_obs, next_act).min(0).values
        target = b.rewards + gamma * (1.0 - b.terminated) * next_q
    q = critic(b.obs, b.actions)  # [2, B]
    td = q - target
    return (b.weights * td.square()).mean(0).sum(), td.detach().abs().mean(0)


def actor_loss(actor: Actor, critic: Critic, b):
    return -critic(b.obs, actor(b.obs))[0].mean()


def make_env(args: Args, device, seed: int):
    import envs  # here, not at the top: a checkpoint's policy loads without the env package
    env = envs.make(args.env, num_envs=args.num_envs, device=device, seed=seed, backend=args.mujoco_backend)
    return wrap_env(env, norm_obs=args.norm_obs, gamma=args.gamma)


def main(args: Args) -> dict:
    ctx, device = distributed.init(resolve_device(args.device))  # torchrun: one learner per rank
    if ctx.enabled and args.resume:
        raise UserError("--resume is a single-process option for now: run without torchrun")
    # --resume (with its settings) and seeds; rank 0's state alone is checkpointed (--resume is single-process)
    run = Run(ALGO, args, defaults=default_args, ctx=ctx, device=device, gather=False)
    args = run.args
    env_seed = args.seed + 1000 * ctx.rank
    env = make_env(args, device, env_seed)
    check_args(args, env)
    obs_space, act_space = env.single_observation_space, env.single_action_space
    obs_dim, act_dim = int(np.prod(obs_space.shape)), int(np.prod(act_space.shape))
    net = dict(obs_dim=obs_dim, act_dim=act_dim, hidden=args.hidden)
    actor = Actor(**net).to(device)
    critic = Critic(obs_dim, act_dim, args.hidden).to(device)
    actor_t = Actor(obs_dim, act_dim, args.hidden).to(device)
    critic_t = Critic(obs_dim, act_dim, args.hidden).to(device)
    distributed.broadcast(ctx, [actor, critic])  # every rank starts from rank 0's weights
    actor_t.load_state_dict(actor.state_dict())
    critic_t.load_state_dict(critic.state_dict())
    capturable = args.compile and device.type == "cuda"  # Adam's step counter on the device (CUDA graphs)
    adam_kw = dict(capturable=True) if capturable else dict(fused=device.type == "cpu")  # CPU: one fused kernel, not a loop of small ops
    actor_opt = torch.optim.Adam(actor.parameters(), lr=args.actor_lr, **adam_kw)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=args.critic_lr, **adam_kw)
    if args.per:
        rb = PrioritizedReplayBuffer(args.buffer_size, (obs_dim,), (act_dim,), torch.float32, device, alpha=args.per_alpha)
    else:
        rb = ReplayBuffer(args.buffer_size, (obs_dim,), (act_dim,), torch.float32, device)
    c_loss_fn, a_loss_fn, act_fn = critic_loss, actor_loss, actor
    actor_step, critic_step = actor_opt.step, critic_opt.step  # compiled with --compile
    if args.compile:
        c_loss_fn, a_loss_fn, act_fn = compile_fn(critic_loss, device), compile_fn(actor_loss, device), compile_fn(act_fn, device)
        actor_step, critic_step = (compile_fn(f, device, graphs=False) for f in (actor_step, critic_step))
    params_t = list(actor_t.parameters()) + list(critic_t.parameters())
    params = list(actor.parameters()) + list(critic.parameters())
    fused, optimizers = [actor, critic, actor_t, critic_t], [actor_opt, critic_opt]

    N, W = args.num_envs, ctx.world_size
    noise = ColoredNoise(args.noise_color, (N, act_dim), device=device)
    K = args.pipeline_segment if args.pipeline else 1  # vectorized steps per segment
    num_iterations = args.total_steps // (N * W)  # --total-steps counts all ranks
    obs = env.reset(seed=env_seed)[0].clone()  # where the next step starts: a fixed buffer
    explore_gen = torch.Generator(device).manual_seed(int(torch.randint(2**62, ()))) if args.pipeline else None
    obs_norm = find_wrapper(env, NormalizeObservation)
    obs_rms = obs_norm.rms if obs_norm else None

    # the deployable policy: observation normalizer, actor, action scaling to the env's own bounds (common/policy.py)
    policy = Policy.of(actor, net, env)
    # the state a checkpoint holds and a resumed run restores, named once
    run.start(env, dict(actor=actor, critic=critic, actor_target=actor_t, critic_target=critic_t,
                    actor_opt=actor_opt, critic_opt=critic_opt, buffer=rb, env=env, noise=noise, next_obs=obs,
                    explore_rng=explore_gen), policy,
              extra=lambda: dict(updates=updates,
                                 learned=learned))
    guard = run.guard
    updates = run.ckpt["updates"] if run.ckpt else 0  # gradient steps so far
    learned = run.ckpt.get("learned", run.start_iter) if run.ckpt else 0  # iterations whose updates are done
    pipe = actor_x = stage = None
    if args.pipeline:  # the explorer's own actor copy and staging buffer (see the module docstring)
        pipe = Pipeline(device)
        actor_x = copy.deepcopy(actor).requires_grad_(False)
        stage = ReplayBuffer(K * N, (obs_dim,), (act_dim,), torch.float32, device)


    # ---- explore: mu(s) + Gaussian noise, uniform actions before learning_starts ------------------------------
    @torch.no_grad()
    def explore(pi: Actor, gen, obs, first: int, last: int, out) -> torch.Tensor:
        """Step the envs for iterations [first, last) with policy `pi` and noise from `gen` (None: torch's
        global RNG), writing the transitions to `out`; returns the next observation."""
        for i in range(first, last):
            if i * N * W < args.learning_starts:
                actions = torch.rand(N, act_dim, device=device, generator=gen) * 2 - 1
            else:
                actions = act_fn(obs) if pi is actor else pi(obs)
                actions = (actions + args.exploration_noise * noise.sample(gen)).clamp(-1, 1)
            next_obs, reward, terminated, truncated, info = env.step(actions)
            guard.watch("observations", next_obs, info["final_obs"])
            guard.watch("rewards", reward)
            out.add(obs, actions, reward, info["final_obs"], terminated)
            obs = next_obs
        return obs

    # ---- learn: gradient_steps updates per vectorized step past learning_starts -------------------------------
    def learn(first: int, last: int) -> None:
        """The updates owed for iterations [first, last), on the replay buffer as it is."""
        nonlocal updates
        for i in range(first, last):
            step = (i + 1) * N * W
            if step < args.learning_starts:
                continue
            beta = args.per_beta + (1.0 - args.per_beta) * min(1.0, step / args.total_steps)
            for _ in range(args.gradient_steps):
                b = rb.sample(args.batch_size, beta=beta)
                c_loss, td_abs = c_loss_fn(actor_t, critic, critic_t, args.gamma, b, args.target_noise, args.noise_clip)
                meter.add(critic_loss=c_loss)
                guard.watch("critic loss", c_loss)
                critic_opt.zero_grad(set_to_none=True)
                c_loss.backward()
                if ctx.enabled and args.fuse_every == 0:
                    distributed.allreduce_gradients(ctx, [critic])
                critic_step()
                guard.watch_params("parameters", critic)  # before the actor loss reads it
                rb.update_priorities(b.indices, td_abs)
                updates += 1
                if updates % args.policy_delay == 0:  # delayed actor and target updates
                    a_loss = a_loss_fn(actor, critic, b)
                    meter.add(actor_loss=a_loss)
                    guard.watch("actor loss", a_loss)
                    actor_opt.zero_grad(set_to_none=True)
                    a_loss.backward(inputs=list(actor.parameters()))  # the critic's gradients would be thrown away
                    if ctx.enabled and args.fuse_every == 0:
                        distributed.allreduce_gradients(ctx, [actor])
                    actor_step()
                    with torch.no_grad():
                        for p_t, p in zip(params_t, params):  # Polyak averaging of the target
                            p_t.lerp_(p, args.tau)
                guard.watch_params("parameters", actor)  # the critic: checked after its step
                guard.check(step)
                if ctx.enabled and args.fuse_every and updates % args.fuse_every == 0:
                    distributed.fuse(ctx, fused, optimizers)

    meter = Meter(device, "critic_loss", "actor_loss")  # summed on the device, read at the logging tick
    # after each segment the shell counts its env steps (all ranks'), checks for NaN, and on their ticks evaluates,
    # logs and checkpoints (rank 0)
    for first in run.iterations(num_iterations, N * W, every=K, learning_starts=args.learning_starts,
                                metrics=lambda: dict(**meter.pop(), updates=updates,
                                                     **(pipe.stats() if pipe is not None else {}))):
        last = min(first + K, num_iterations)
        if pipe is None:  # explore one vectorized step, then learn from it
            obs.copy_(explore(actor, None, obs, first, last, rb))
            learn(learned, last)
            learned = last
        else:  # explore this segment with the actor one segment old while learning the previous segment's steps
            next_obs, _ = pipe.run(partial(explore, actor_x, explore_gen, obs, first, last, stage),
                                   partial(learn, learned, first))
            obs.copy_(next_obs)
            learned = first
            flush(stage, rb)  # handoff: the new transitions to the buffer, the fresh actor to the explorer
            actor_x.load_state_dict(actor.state_dict())
        distributed.fuse_statistics(ctx, [obs_rms])  # every rank normalizes alike
        if last == num_iterations:
            learn(learned, last)  # the pipeline's last segment (nothing left without it)
            learned = last
            distributed.fuse(ctx, fused, optimizers)  # every rank ends with the same model
    if pipe is not None:
        pipe.close()
    result = run.finish(env)
    distributed.shutdown(ctx)
    return result


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: observation normalization, the
    deterministic actor, action rescaling), rebuilt without an env; takes torch or numpy, batched or single obs."""
    return Policy.restore(path, ALGO, Actor, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
