"""TD3 with the ElegantRL-Podracer parallelism: `algos/td3.py` plus pipelining and torchrun.

The algorithm is `algos/td3.py`'s, unchanged (`diff -w algos/td3.py algos/td3_podracer.py` shows
only the parallelism below); with neither feature on, a run is the same run as `algos/td3.py`'s.

* `--pipeline`: pipeline parallelism. Exploring and learning overlap in lockstep segments of
  `--pipeline-segment` vectorized steps: an explorer thread steps the envs with a copy of the actor
  (and its own `torch.Generator` for the exploration noise) while the learner runs the updates
  owed for the previous segment's steps on the buffer as it was when the segment began. At the
  handoff the new transitions enter the buffer and the learner's actor is copied to the explorer,
  so the explorer's actor lags the learner by one segment and the learner's updates lag the data
  by one segment (the last segment's are run after it). Same seed, same result, however the
  threads interleave; the update count is the one without `--pipeline`.
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
from dataclasses import dataclass
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from common import buffers, distributed, pipeline
from common.cli import Count, Count0, Frac, Layers, NonNeg, Rate, RunArgs, Unit, cli, task_defaults
from common.ensemble import EnsembleMLP
from common.errors import UserError
from common.noise import ColoredNoise
from common.policy import Policy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent
from common.wrappers import wrap_env

ALGO = "td3_podracer"
PARENT, FAMILY = "td3", "DDPG/TD3/SAC"  # its lineage (CONTRIBUTING.md)


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    env: str = "Pendulum-v1"  # an env id with a Box action space
    num_envs: int = 4  # number of parallel sub-environments
    total_steps: Count = 40_000  # env steps, summed over sub-envs and ranks (--learning-starts too)
    eval_every: Count0 = 10_000  # evaluate the policy every this many env steps (0: at the end)
    save_every: Count0 = 20_000  # write the checkpoint every this many env steps (0: at the end)
    compile: bool = False  # torch.compile the losses, the optimizer steps and the policy step

    # TD3
    buffer_size: Count = 1_000_000  # replay buffer capacity (transitions)
    batch_size: Count = 256  # minibatch size of each update
    actor_lr: Rate = 1e-3  # Adam learning rate of the actor
    critic_lr: Rate = 1e-3  # Adam learning rate of the critic
    gamma: Unit = 0.99  # discount factor
    tau: Frac = 0.005  # target networks' Polyak rate
    exploration_noise: NonNeg = 0.1  # std of the Gaussian exploration noise (actions in [-1, 1])
    # exploration noise color (common/noise.py): 0 white (i.i.d. each step), 1 pink, 2 red;
    # correlated noise wanders further, which tasks with a distant reward need
    noise_color: float = 0.0
    policy_delay: Count = 2  # critic updates per actor (and target) update
    target_noise: NonNeg = 0.2  # std of the target policy smoothing noise
    noise_clip: NonNeg = 0.5  # clip of the target policy smoothing noise
    learning_starts: Count0 = 2_000  # environment steps of uniformly random actions before learning
    gradient_steps: Count = 4  # updates after each vectorized step (UTD: gradient_steps / num_envs)
    hidden: Layers = (256, 256)  # hidden layer sizes of actor and critic
    norm_obs: bool = False  # normalize observations with running statistics
    per: bool = False  # proportional prioritized experience replay
    per_alpha: Unit = 0.6  # PER priority exponent
    per_beta: Unit = 0.4  # PER initial importance-sampling exponent (annealed to 1)

    # parallelism
    pipeline: bool = False  # explore the next segment in a thread while learning from the last one
    # vectorized steps per pipeline segment; the explorer's actor is refreshed after each
    pipeline_segment: Count = 16
    # under torchrun: average actors, critics and their Adam moments across ranks every this many
    # updates (model fusion); 0: average the gradients before every optimizer step instead
    fuse_every: Count0 = 1


# Per-task defaults over the ones above, from held-out sweeps (bench/sweep.py;
# bench/NOTES.md#defaults-the-evidence); `--env X --help` lists them
# fmt: off
TASK_DEFAULTS = {
    # (td3's classic-control rows, checked on this file)
    "Pendulum-v1": dict(hidden=(64, 64), learning_starts=1_000, total_steps=20_000, tau=0.05,
                        actor_lr=3e-3, critic_lr=3e-3),
    "MountainCarContinuous-v0": dict(hidden=(64, 64), noise_color=1.0, exploration_noise=0.5,
                                     total_steps=50_000),
    # MuJoCo v5 (td3's rows): the paper's setting as CleanRL's td3_continuous_action.py runs it
    **{t: dict(num_envs=1, gradient_steps=1, learning_starts=25_000, actor_lr=3e-4,
               critic_lr=3e-4, total_steps=1_000_000, eval_every=20_000, save_every=50_000)
       for t in ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5")},
    # Box2D (td3's rows): RL Zoo's settings; LunarLander with the seeds' gamma 0.99 (RL Zoo: 0.98,
    # whose lander hovered; held-out seeds in bench/NOTES.md)
    **{t: dict(num_envs=1, gradient_steps=1, learning_starts=10_000, actor_lr=1e-3, critic_lr=1e-3,
               gamma=g, buffer_size=200_000, hidden=(400, 300), total_steps=n,
               eval_every=10_000, save_every=50_000)
       for t, n, g in (("LunarLanderContinuous-v3", 300_000, 0.99),
                       ("BipedalWalker-v3", 1_000_000, 0.98))},
}
# fmt: on
default_args = task_defaults(Args, TASK_DEFAULTS)


def check_args(args: Args, env) -> None:  # (each field's own range: common.cli.check_ranges)
    check_single_agent(env, args.env, ALGO, flat=True)
    if not isinstance(env.single_action_space, gym.spaces.Box):
        raise UserError(
            f"{ALGO} needs a continuous (Box) action space (Discrete: dqn.py, ppo_vec.py)"
        )
    if args.buffer_size < args.num_envs:
        raise UserError(f"--buffer-size must hold one vectorized step ({args.num_envs})")


class Actor(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, hidden=(256, 256)):
        super().__init__()
        sizes, layers = [obs_dim, *hidden], []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers += [nn.Linear(sizes[-1], act_dim), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, obs: dict) -> torch.Tensor:
        return self.net(obs["policy"])


class Critic(nn.Module):
    """K independent Q(s, a) heads evaluated in one call: returns `[K, B]`."""

    def __init__(self, obs_dim: int, act_dim: int, hidden=(256, 256), num_critics: int = 2):
        super().__init__()
        self.q = EnsembleMLP(num_critics, obs_dim + act_dim, hidden, 1)

    def forward(self, obs: dict, act: torch.Tensor, members=None) -> torch.Tensor:
        return self.q(torch.cat([obs["policy"], act], -1), members).squeeze(-1)


def critic_loss(actor_t, critic, critic_t, gamma: float, b, target_noise: float, noise_clip: float):
    """Importance-weighted squared TD error of both critics against
    r + gamma * (1 - terminated) * min_k Q'_k(s', clip(mu'(s') + clip(noise)))."""
    with torch.no_grad():
        noise = (torch.randn_like(b["actions"]) * target_noise).clamp(-noise_clip, noise_clip)
        next_act = (actor_t(b["next_obs"]) + noise).clamp(-1.0, 1.0)
        next_q = critic_t(b["next_obs"], next_act).min(0).values
        target = b["rewards"] + gamma * (1.0 - b["terminated"]) * next_q
    q = critic(b["obs"], b["actions"])  # [2, B]
    td = q - target
    return (b["weights"] * td.square()).mean(0).sum(), td.detach().abs().mean(0)


def actor_loss(actor: Actor, critic: Critic, b):
    """-Q_1(s, mu(s)): the first critic alone, as the paper (the second is not evaluated)."""
    return -critic(b["obs"], actor(b["obs"]), members=slice(0, 1))[0].mean()


def make_env(args: Args, device, seed: int):
    import envs  # here, not at the top: a checkpoint's policy loads without the env package

    env = envs.make(args.env, args.num_envs, device, seed, backend=args.mujoco_backend)
    return wrap_env(env, norm_obs=args.norm_obs, gamma=args.gamma, groups=True)


def main(args: Args) -> dict:
    ctx, device = distributed.init(args.device)  # torchrun: one learner per rank
    if ctx.enabled and args.resume:
        raise UserError("--resume is a single-process option for now: run without torchrun")
    # --resume (with its settings) and seeds; rank 0's state alone is checkpointed
    run = Run(ALGO, args, defaults=default_args, ctx=ctx, device=device, gather=False)
    args = run.args
    env_seed = args.seed + 1000 * ctx.rank
    env = make_env(args, device, env_seed)
    check_args(args, env)
    obs_space, act_space = env.single_observation_space["policy"], env.single_action_space
    obs_dim, act_dim = int(np.prod(obs_space.shape)), int(np.prod(act_space.shape))
    net = dict(obs_dim=obs_dim, act_dim=act_dim, hidden=args.hidden)
    actor = Actor(**net).to(device)
    critic = Critic(obs_dim, act_dim, args.hidden).to(device)
    actor_t = Actor(obs_dim, act_dim, args.hidden).to(device)
    critic_t = Critic(obs_dim, act_dim, args.hidden).to(device)
    distributed.broadcast(ctx, [actor, critic])  # every rank starts from rank 0's weights
    actor_t.load_state_dict(actor.state_dict())
    critic_t.load_state_dict(critic.state_dict())
    # compiled on CUDA (graphs): Adam's step counter on the device; CPU: one fused kernel
    capturable = args.compile and device.type == "cuda"
    adam_kw = dict(capturable=True) if capturable else dict(fused=device.type == "cpu")
    actor_opt = torch.optim.Adam(actor.parameters(), lr=args.actor_lr, **adam_kw)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=args.critic_lr, **adam_kw)
    # --compile, else as they are
    c_loss_fn, a_loss_fn = run.compile(critic_loss), run.compile(actor_loss)
    act_fn = run.compile(actor)
    actor_step = run.compile(actor_opt.step, graphs=False)
    critic_step = run.compile(critic_opt.step, graphs=False)
    params_t = list(actor_t.parameters()) + list(critic_t.parameters())
    params = list(actor.parameters()) + list(critic.parameters())
    fused, optimizers = [actor, critic, actor_t, critic_t], [actor_opt, critic_opt]

    N, W = args.num_envs, ctx.world_size
    noise = ColoredNoise(args.noise_color, (N, act_dim), device=device)
    K = args.pipeline_segment if args.pipeline else 1  # vectorized steps per segment
    num_iterations = args.total_steps // (N * W)  # --total-steps counts all ranks
    obs = Batch(env.reset(seed=env_seed)[0]).clone()  # where the next step starts: a fixed buffer
    # replay rows shaped and typed as one vectorized step's observation and actions
    rb_args = (args.buffer_size, obs, torch.zeros(N, act_dim, device=device))
    if args.per:
        rb = buffers.PrioritizedReplayBuffer(*rb_args, alpha=args.per_alpha)
    else:
        rb = buffers.ReplayBuffer(*rb_args)
    explore_gen = None  # the explorer thread's own generator (--pipeline)
    if args.pipeline:
        explore_gen = torch.Generator(device).manual_seed(int(torch.randint(2**62, ())))
    stats = distributed.norm_stats(env)  # the observation statistics, pooled across ranks
    # the deployable policy: normalizer, actor, action scaling (common/policy.py)
    policy = Policy.of(actor, net, env)
    # the state a checkpoint holds and a resumed run restores, named once
    state = dict(actor=actor, critic=critic, actor_target=actor_t, critic_target=critic_t)
    state.update(actor_opt=actor_opt, critic_opt=critic_opt, buffer=rb, env=env)
    state.update(noise=noise, next_obs=obs, explore_rng=explore_gen)
    # iterations whose updates are done
    learned = run.ckpt.get("learned", run.ckpt["iteration"]) if run.ckpt else 0
    run.start(env, state, policy, extra=lambda: dict(learned=learned))
    guard = run.guard
    meter = run.meter("critic_loss", "actor_loss")
    pipe = actor_x = stage = None
    if args.pipeline:  # the explorer's own actor copy and staging buffer (see the docstring)
        pipe = pipeline.Pipeline(device)
        actor_x = copy.deepcopy(actor).requires_grad_(False)
        stage = buffers.ReplayBuffer(K * N, *rb_args[1:])

    # ---- explore: mu(s) + Gaussian noise, uniform actions before learning_starts -----------------
    @torch.no_grad()
    def explore(pi: Actor, gen, obs, first: int, last: int, out) -> torch.Tensor:
        """Step the envs for iterations [first, last) with policy `pi` and noise from `gen` (None:
        torch's global RNG), writing the transitions to `out`; returns the next observation."""
        for i in range(first, last):
            if i * N * W < args.learning_starts:
                actions = torch.rand(N, act_dim, device=device, generator=gen) * 2 - 1
            else:
                actions = act_fn(obs) if pi is actor else pi(obs)
                actions = (actions + args.exploration_noise * noise.sample(gen)).clamp(-1, 1)
            next_obs, reward, terminated, truncated, info = env.step(actions)
            out.add(obs, actions, reward, info["final_obs"], terminated)
            obs = next_obs
        return obs

    # ---- learn: gradient_steps updates per vectorized step past learning_starts ------------------
    def learn(first: int, last: int) -> None:
        """The updates owed for iterations [first, last), on the replay buffer as it is."""
        for i in range(first, last):
            step = (i + 1) * N * W
            if step < args.learning_starts:
                continue
            beta = args.per_beta + (1.0 - args.per_beta) * min(1.0, step / args.total_steps)
            for _ in range(args.gradient_steps):
                b = rb.sample(args.batch_size, beta=beta)
                smoothing = args.target_noise, args.noise_clip
                c_loss, td_abs = c_loss_fn(actor_t, critic, critic_t, args.gamma, b, *smoothing)
                meter.add(critic_loss=c_loss)
                guard.watch("critic loss", c_loss)
                critic_opt.zero_grad()
                c_loss.backward()
                if ctx.enabled and args.fuse_every == 0:
                    distributed.allreduce_gradients(ctx, [critic])
                critic_step()
                guard.watch_params("parameters", critic)  # before the actor loss reads it
                rb.update_priorities(b["indices"], td_abs)
                run.updates += 1
                if run.updates % args.policy_delay == 0:  # delayed actor and target updates
                    a_loss = a_loss_fn(actor, critic, b)
                    meter.add(actor_loss=a_loss)
                    guard.watch("actor loss", a_loss)
                    actor_opt.zero_grad()
                    a_loss.backward(inputs=list(actor.parameters()))  # not the critic's: unused
                    if ctx.enabled and args.fuse_every == 0:
                        distributed.allreduce_gradients(ctx, [actor])
                    actor_step()
                    with torch.no_grad():
                        for p_t, p in zip(params_t, params):  # Polyak averaging of the target
                            p_t.lerp_(p, args.tau)
                guard.watch_params("parameters", actor)  # the critic: checked after its step
                guard.check(step)
                if ctx.enabled and args.fuse_every and run.updates % args.fuse_every == 0:
                    distributed.fuse(ctx, fused, optimizers)

    def metrics():  # (and the pipeline's explore/learn overlap)
        return pipe.stats() if pipe is not None else {}

    # one segment of K vectorized steps an iteration (under torchrun rank 0 evaluates and logs)
    for first in run.iterations(num_iterations, N * W, metrics, args.learning_starts, every=K):
        last = min(first + K, num_iterations)
        if pipe is None:  # explore one vectorized step, then learn from it
            obs.copy_(explore(actor, None, obs, first, last, rb))
            learn(learned, last)
            learned = last
        else:  # explore this segment with the actor one segment old, learn the previous segment's
            explore_x = partial(explore, actor_x, explore_gen, obs, first, last, stage)
            next_obs, _ = pipe.run(explore_x, partial(learn, learned, first))
            obs.copy_(next_obs)
            learned = first
            # handoff: the new transitions to the buffer, the fresh actor to the explorer
            pipeline.flush(stage, rb)
            actor_x.load_state_dict(actor.state_dict())
        distributed.fuse_statistics(ctx, stats)  # every rank normalizes alike
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
    """The deployable policy of a checkpoint of this file (common/policy.py: normalization, the
    deterministic actor, action rescaling), rebuilt without an env."""
    return Policy.restore(path, ALGO, Actor, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
