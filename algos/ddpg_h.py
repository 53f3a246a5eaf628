"""DDPG-H: DDPG with the H-term, on vectorized environments.

`algos/ddpg.py` plus ElegantRL's H-term (Hamiltonian term), an extra actor-only update on whole
trajectory windows that trades compute for stability (`h_term_loss` below; the trajectories are
kept by `common.buffers.TrajectoryStore`):
* every explored step goes into a device trajectory store that keeps the last `h_term_horizon`
  steps of each sub-env and a table of the episodes that finished there;
* every `h_term_update_gap` vectorized steps, the stored episodes are ranked by return, the lowest
  `h_term_drop_rate` dropped, and `h_term_batch` windows of `h_term_k_step` steps drawn from the
  rest;
* for each window, H = sum_k h_term_gamma^k * log pi(a_k|s_k) under the current policy, and the
  actor takes one extra step on -h_term_lambda * mean(H * normalized episode return), with its
  own Adam and a gradient-norm clip (`h_term_max_grad_norm`).
The policy is deterministic, so log pi(a|s) is that of the exploration distribution: a Gaussian
centred on the actor's action mu(s) with the exploration noise's std (`exploration_noise`).
The H-term's share of wall time is logged (`h_term_time_share`) so its cost can be traded.

    python algos/ddpg_h.py --env Pendulum-v1
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from common.buffers import PrioritizedReplayBuffer, ReplayBuffer, TrajectoryStore
from common.cli import Count, Count0, Frac, Layers, NonNeg, Rate, RunArgs, Unit, cli, task_defaults
from common.ensemble import EnsembleMLP
from common.errors import UserError
from common.noise import ColoredNoise
from common.policy import Policy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent
from common.wrappers import wrap_env

ALGO = "ddpg_h"
PARENT, FAMILY = "ddpg", "DDPG/TD3/SAC"  # its lineage (CONTRIBUTING.md)


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    env: str = "Pendulum-v1"  # an env id with a Box action space
    num_envs: int = 4  # number of parallel sub-environments
    total_steps: Count = 40_000  # total environment steps (summed over sub-envs)
    eval_every: Count0 = 10_000  # evaluate the policy every this many env steps (0: at the end)
    save_every: Count0 = 20_000  # write the checkpoint every this many env steps (0: at the end)
    compile: bool = False  # torch.compile the losses, the optimizer steps and the policy step
    capture: bool = True  # on CUDA, a step's updates as one CUDA graph (not with --per, --compile)

    # DDPG
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
    learning_starts: Count0 = 2_000  # environment steps of uniformly random actions before learning
    gradient_steps: Count = 4  # updates after each vectorized step (UTD: gradient_steps / num_envs)
    hidden: Layers = (256, 256)  # hidden layer sizes of actor and critic
    norm_obs: bool = False  # normalize observations with running statistics
    per: bool = False  # proportional prioritized experience replay
    per_alpha: Unit = 0.6  # PER priority exponent
    per_beta: Unit = 0.4  # PER initial importance-sampling exponent (annealed to 1)

    # H-term
    h_term_lambda: Unit = 0.01  # weight of the H-term loss
    h_term_gamma: Unit = 0.99  # discount of the log-probabilities accumulated along a window
    h_term_k_step: Count = 16  # window length K
    h_term_drop_rate: Unit = 0.125  # fraction of the stored episodes (lowest returns) left out
    h_term_batch: Count = 256  # windows per H-term update
    h_term_update_gap: Count = 4  # vectorized steps (of `gradient_steps` updates) between H-terms
    # steps of history kept per sub-env; an episode longer than this is never ranked
    # (0: the env's time limit, within 1,024 to 4,096)
    h_term_horizon: Count0 = 0
    h_term_max_episodes: int = 4096  # episodes remembered in the store's table
    h_term_max_grad_norm: float = 1.0  # gradient-norm clip of the H-term step


# Per-task defaults over the ones above, from held-out sweeps (bench/sweep.py;
# bench/NOTES.md#defaults-the-evidence); `--env X --help` lists them
# fmt: off
TASK_DEFAULTS = {
    # (td3's classic-control rows, checked on this file)
    "Pendulum-v1": dict(hidden=(64, 64), learning_starts=1_000, total_steps=20_000, tau=0.05,
                        actor_lr=3e-3, critic_lr=3e-3),
    "MountainCarContinuous-v0": dict(hidden=(64, 64), noise_color=1.0, exploration_noise=0.5,
                                     total_steps=50_000),
    # MuJoCo v5 (ddpg's rows): the paper's setting as CleanRL's ddpg_continuous_action.py runs it
    **{t: dict(num_envs=1, gradient_steps=1, learning_starts=25_000, actor_lr=3e-4,
               critic_lr=3e-4, total_steps=1_000_000, eval_every=20_000, save_every=50_000)
       for t in ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5")},
    # Box2D (ddpg's rows): RL Zoo's settings (its ddpg.yml's rows are td3's); LunarLander
    # with the seeds' gamma 0.99, as td3's (RL Zoo: 0.98, whose TD3 lander hovered; bench/NOTES.md)
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
    if args.h_term_drop_rate >= 1.0:
        raise UserError(f"--h-term-drop-rate must be below 1, got {args.h_term_drop_rate}")
    if 0 < args.h_term_horizon < args.h_term_k_step:
        raise UserError("--h-term-horizon must be 0 (the time limit) or at least --h-term-k-step")


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

    def __init__(self, obs_dim: int, act_dim: int, hidden=(256, 256), num_critics: int = 1):
        super().__init__()
        self.q = EnsembleMLP(num_critics, obs_dim + act_dim, hidden, 1)

    def forward(self, obs: dict, act: torch.Tensor) -> torch.Tensor:
        return self.q(torch.cat([obs["policy"], act], -1)).squeeze(-1)


def critic_loss(actor_t: Actor, critic: Critic, critic_t: Critic, gamma: float, b):
    """Importance-weighted squared TD error against r + gamma * (1 - terminated) * Q'(s',
    mu'(s'))."""
    with torch.no_grad():
        next_q = critic_t(b["next_obs"], actor_t(b["next_obs"]))[0]
        target = b["rewards"] + gamma * (1.0 - b["terminated"]) * next_q
    q = critic(b["obs"], b["actions"])[0]
    td = q - target
    return (b["weights"] * td.square()).mean(), td.detach().abs()


def actor_loss(actor: Actor, critic: Critic, b):
    return -critic(b["obs"], actor(b["obs"]))[0].mean()


def h_term_loss(logp, mask, returns_norm, gamma: float, lam: float):
    """The H-term on `[B, K]` windows: H_b = sum_k gamma^k log pi(a_k|s_k) (masked past an
    episode's end), and loss = -lam * mean_b(H_b * normalized return of b's episode): the actor
    raises the discounted log-likelihood of good trajectories and lowers that of poor ones (a
    trajectory-level REINFORCE with a return baseline)."""
    discount = gamma ** torch.arange(logp.shape[1], device=logp.device, dtype=logp.dtype)
    return -lam * ((discount * logp * mask).sum(1) * returns_norm).mean()


def make_env(args: Args, device, seed: int):
    import envs  # here, not at the top: a checkpoint's policy loads without the env package

    env = envs.make(args.env, args.num_envs, device, seed, backend=args.mujoco_backend)
    return wrap_env(env, norm_obs=args.norm_obs, gamma=args.gamma, groups=True)


def main(args: Args) -> dict:
    run = Run(ALGO, args, defaults=default_args)  # device, --resume (with its settings), seeds
    args, device = run.args, run.device
    env = make_env(args, device, args.seed)
    check_args(args, env)
    obs_space, act_space = env.single_observation_space["policy"], env.single_action_space
    obs_dim, act_dim = int(np.prod(obs_space.shape)), int(np.prod(act_space.shape))
    net = dict(obs_dim=obs_dim, act_dim=act_dim, hidden=args.hidden)
    actor = Actor(**net).to(device)
    critic = Critic(obs_dim, act_dim, args.hidden).to(device)
    actor_t = Actor(obs_dim, act_dim, args.hidden).to(device)
    critic_t = Critic(obs_dim, act_dim, args.hidden).to(device)
    actor_t.load_state_dict(actor.state_dict())
    critic_t.load_state_dict(critic.state_dict())
    capture = args.capture and not (args.per or args.compile)  # see learn()
    # compiled on CUDA (graphs): Adam's step counter on the device; CPU: one fused kernel
    capturable = (args.compile or capture) and device.type == "cuda"
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

    N = args.num_envs
    noise = ColoredNoise(args.noise_color, (N, act_dim), device=device)
    # its own Adam: log-probabilities of old actions can have large gradients that would distort
    # the actor optimizer's moment estimates
    h_opt = torch.optim.Adam(actor.parameters(), lr=args.actor_lr, **adam_kw)
    h_time = loop_time = 0.0
    num_iterations = args.total_steps // N
    obs = Batch(env.reset(seed=args.seed)[0]).clone()  # where the next step starts: a fixed buffer
    # replay rows shaped and typed as one vectorized step's observation and actions
    rb_args = (args.buffer_size, obs, torch.zeros(N, act_dim, device=device))
    if args.per:
        rb = PrioritizedReplayBuffer(*rb_args, alpha=args.per_alpha)
    else:
        rb = ReplayBuffer(*rb_args)
    h_shapes = (obs, (act_dim,), torch.float32)  # the H-term's store of recent steps
    # an episode must fit the store whole to be ranked: by default it holds the env's time limit
    # (a limit past 4,096 steps is a guard, as MinAtar's 10,000, more than an episode's length)
    limit = getattr(env, "max_episode_steps", None) or 0
    horizon = args.h_term_horizon or min(max(1024, limit), 4096)
    store = TrajectoryStore(N, horizon, *h_shapes, args.h_term_max_episodes, device)
    # the deployable policy: normalizer, actor, action scaling (common/policy.py)
    policy = Policy.of(actor, net, env)
    # the state a checkpoint holds and a resumed run restores, named once
    state = dict(actor=actor, critic=critic, actor_target=actor_t, critic_target=critic_t)
    state.update(actor_opt=actor_opt, critic_opt=critic_opt, buffer=rb, env=env)
    state.update(h_store=store, h_opt=h_opt, noise=noise, next_obs=obs)
    run.start(env, state, policy)
    guard = run.guard
    meter = run.meter("critic_loss", "actor_loss")

    def metrics():
        return dict(h_term_time_share=h_time / max(loop_time, 1e-9))

    def learn():
        """The `gradient_steps` updates of one vectorized step.

        On CUDA (`--capture`, the default) they are one CUDA graph, recorded once and replayed
        each step (common/graphs.py): they read and write fixed tensors in place (the buffer and
        its fill, parameters, capturable Adams' moments, the meter's sums, the guard's flag) and
        never wait for the host. Left eager with prioritized replay (its beta moves each step)
        and with `--compile` (its own graphs)."""
        for _ in range(args.gradient_steps):
            b = rb.sample(args.batch_size, beta=beta)
            c_loss, td_abs = c_loss_fn(actor_t, critic, critic_t, args.gamma, b)
            meter.add(critic_loss=c_loss)
            guard.watch("critic loss", c_loss)
            critic_opt.zero_grad()
            c_loss.backward()
            critic_step()
            guard.watch_params("parameters", critic)  # before the actor loss reads it
            rb.update_priorities(b["indices"], td_abs)
            a_loss = a_loss_fn(actor, critic, b)
            meter.add(actor_loss=a_loss)
            guard.watch("actor loss", a_loss)
            actor_opt.zero_grad()
            a_loss.backward(inputs=list(actor.parameters()))  # not the critic's: unused
            actor_step()
            with torch.no_grad():
                for p_t, p in zip(params_t, params):  # Polyak averaging of the target
                    p_t.lerp_(p, args.tau)
            guard.watch_params("parameters", actor)  # the critic: checked after its step

    update = run.capture(learn, [rb, guard, meter, actor_opt, critic_opt], enabled=capture)
    for iteration in run.iterations(num_iterations, N, metrics, args.learning_starts):
        t_iter = time.perf_counter()
        # ---- explore: mu(s) + Gaussian noise, uniform actions before learning_starts -------------
        with torch.no_grad():
            if run.step < args.learning_starts:
                actions = torch.rand(N, act_dim, device=device) * 2 - 1
            else:
                actions = act_fn(obs)
                actions = (actions + args.exploration_noise * noise.sample()).clamp(-1, 1)
        next_obs, reward, terminated, truncated, info = env.step(actions)
        rb.add(obs, actions, reward, info["final_obs"], terminated)
        store.add(obs, actions, reward, terminated | truncated)
        obs.copy_(next_obs)
        step = run.step + N  # env steps so far, this one's included
        guard.check(step)

        # ---- learn -------------------------------------------------------------------------------
        if step >= args.learning_starts:
            beta = args.per_beta + (1.0 - args.per_beta) * min(1.0, step / args.total_steps)
            update()
            run.updates += args.gradient_steps
            guard.check(step)

        # ---- H-term: an extra actor-only step on trajectory windows ------------------------------
        if step >= args.learning_starts and iteration % args.h_term_update_gap == 0:
            t_h = time.perf_counter()
            windows = args.h_term_batch, args.h_term_k_step, args.h_term_drop_rate
            w_obs, w_act, w_mask, w_ret, _ = store.sample(*windows)
            B, K = w_mask.shape
            mu = actor(w_obs.flatten())  # log N(a; mu(s), sigma^2 I)
            std = torch.full_like(mu, args.exploration_noise)  # not a float: a host copy each time
            pi_dist = torch.distributions.Normal(mu, std, validate_args=False)  # no validation sync
            logp = pi_dist.log_prob(w_act.reshape(B * K, act_dim)).sum(-1).reshape(B, K)
            h_loss = h_term_loss(logp, w_mask, w_ret, args.h_term_gamma, args.h_term_lambda)
            guard.watch("H-term loss", h_loss)
            h_opt.zero_grad()
            h_loss.backward()
            nn.utils.clip_grad_norm_(actor.parameters(), args.h_term_max_grad_norm)
            h_opt.step()
            guard.watch_params("parameters", actor)
            guard.check(step)
            h_time += time.perf_counter() - t_h  # host time; on CUDA the work may still be queued
        loop_time += time.perf_counter() - t_iter
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: normalization, the
    deterministic actor, action rescaling), rebuilt without an env."""
    return Policy.restore(path, ALGO, Actor, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
