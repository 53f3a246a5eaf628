"""SAC-H: SAC with the H-term, on vectorized environments.

`algos/sac.py` plus ElegantRL's H-term (Hamiltonian term), an extra actor-only update on whole
trajectory windows that trades compute for stability (`h_term_loss` below; the store of trajectories
is `common.buffers.TrajectoryStore`):
* every explored step goes into a device trajectory store that keeps the last `h_term_horizon`
  steps of each sub-env and a table of the episodes that finished there;
* every `h_term_update_gap` vectorized steps, the stored episodes are ranked by return, the lowest
  `h_term_drop_rate` (default 1/8) dropped, and `h_term_batch` windows of `h_term_k_step`
  (default 16) steps drawn from the rest;
* for each window, H = sum_k h_term_gamma^k * log pi(a_k|s_k) under the current policy, and the
  actor takes one extra step on  -h_term_lambda * mean(H * normalized episode return), with its
  own Adam and a gradient-norm clip (`h_term_max_grad_norm`).
log pi(a|s) is the squashed Gaussian's density of the stored action (inverted through the tanh).
The H-term's share of wall time is logged (`h_term_time_share`) so its cost can be traded.

    python algos/sac_h.py --env Pendulum-v1
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from common.buffers import PrioritizedReplayBuffer, ReplayBuffer, TrajectoryStore
from common.cli import Count, Count0, Frac, Layers, Rate, RunArgs, Unit, cli, task_defaults
from common.ensemble import EnsembleMLP
from common.errors import UserError
from common.noise import ColoredNoise
from common.policy import Policy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent
from common.wrappers import wrap_env

ALGO = "sac_h"
PARENT, FAMILY = "sac", "DDPG/TD3/SAC"  # its lineage (CONTRIBUTING.md)


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    env: str = "Pendulum-v1"  # an env id with a Box action space
    num_envs: int = 4  # number of parallel sub-environments
    total_steps: Count = 40_000  # total environment steps (summed over sub-envs)
    eval_every: Count0 = 10_000  # evaluate the policy every this many env steps (0: at the end)
    save_every: Count0 = 20_000  # write the checkpoint every this many env steps (0: at the end)
    compile: bool = False  # torch.compile the losses, the optimizer steps and the policy step
    capture: bool = True  # on CUDA, a step's updates as one CUDA graph (not with --per, --compile)

    # SAC
    buffer_size: Count = 1_000_000  # replay buffer capacity (transitions)
    batch_size: Count = 256  # minibatch size of each update
    actor_lr: Rate = 1e-3  # Adam learning rate of the actor
    critic_lr: Rate = 1e-3  # Adam learning rate of the critic
    gamma: Unit = 0.99  # discount factor
    tau: Frac = 0.005  # target networks' Polyak rate
    alpha_lr: Rate = 1e-3  # Adam learning rate of the temperature
    init_alpha: Rate = 1.0  # initial temperature
    autotune: bool = True  # learn the temperature (target entropy -action_dim); else init_alpha
    # color of the policy samples' Gaussian draw (common/noise.py): 0 white, 1 pink, 2 red;
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
    # vectorized steps (each of `gradient_steps` updates) between H-term updates
    h_term_update_gap: Count = 4
    # steps of history kept per sub-env; an episode longer than this is never ranked
    # (0: the env's time limit, within 1,024 to 4,096)
    h_term_horizon: Count0 = 0
    h_term_max_episodes: Count = 4096  # episodes remembered in the store's table
    h_term_max_grad_norm: float = 1.0  # gradient-norm clip of the H-term step


# Per-task defaults over the ones above, from held-out sweeps (bench/sweep.py;
# bench/NOTES.md#defaults-the-evidence); `--env X --help` lists them
# fmt: off
TASK_DEFAULTS = {
    # (sac's classic-control rows, checked on this file)
    "Pendulum-v1": dict(hidden=(64, 64), num_envs=8, gradient_steps=4, learning_starts=1_000,
                        total_steps=20_000, tau=0.02, actor_lr=3e-3, critic_lr=1e-2),
    # a fixed temperature: a tuned one shrinks the policy's std before some seeds find the flag
    "MountainCarContinuous-v0": dict(hidden=(64, 64), noise_color=1.0, autotune=False,
                                     init_alpha=0.5, total_steps=50_000),
    # MuJoCo v5 (sac's rows): the paper's setting as CleanRL's sac_continuous_action.py runs it
    **{t: dict(num_envs=1, gradient_steps=1, learning_starts=5_000, actor_lr=3e-4,
               total_steps=1_000_000, eval_every=20_000, save_every=50_000)
       for t in ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5")},
    # Box2D (sac's rows): RL Zoo's settings (without its learning-rate schedule and gSDE)
    "LunarLanderContinuous-v3": dict(num_envs=1, gradient_steps=1, learning_starts=10_000,
                                     actor_lr=7.3e-4, critic_lr=7.3e-4, alpha_lr=7.3e-4, tau=0.01,
                                     hidden=(400, 300), total_steps=500_000, eval_every=10_000,
                                     save_every=50_000),
    "BipedalWalker-v3": dict(num_envs=1, gradient_steps=1, learning_starts=10_000, actor_lr=7.3e-4,
                             critic_lr=7.3e-4, alpha_lr=7.3e-4, gamma=0.98, tau=0.02,
                             buffer_size=300_000, hidden=(400, 300), total_steps=500_000,
                             eval_every=10_000, save_every=50_000),
}
# fmt: on
default_args = task_defaults(Args, TASK_DEFAULTS)


def check_args(args: Args, env) -> None:  # (each field's own range: common.cli.check_ranges)
    check_single_agent(env, args.env, ALGO, flat=True)
    if not isinstance(env.single_action_space, gym.spaces.Box):
        raise UserError(
            f"{ALGO} needs a continuous (Box) action space (Discrete: dqn.py, ppo_vec.py)"
        )
    if args.h_term_drop_rate == 1.0:
        raise UserError("--h-term-drop-rate must be below 1: it would drop every episode")
    if 0 < args.h_term_horizon < args.h_term_k_step:
        raise UserError("--h-term-horizon must be 0 (the time limit) or at least --h-term-k-step")
    if args.buffer_size < args.num_envs:
        raise UserError(f"--buffer-size must hold one vectorized step ({args.num_envs})")


LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class Actor(nn.Module):
    """Squashed Gaussian policy: `forward` is the deterministic action tanh(mu(s))."""

    def __init__(self, obs_dim: int, act_dim: int, hidden=(256, 256)):
        super().__init__()
        sizes, layers = [obs_dim, *hidden], []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.trunk = nn.Sequential(*layers)
        self.mean = nn.Linear(sizes[-1], act_dim)
        self.log_std = nn.Linear(sizes[-1], act_dim)

    def forward(self, obs: dict) -> torch.Tensor:
        return torch.tanh(self.mean(self.trunk(obs["policy"])))

    def sample(self, obs: dict, eps: torch.Tensor | None = None):
        """A reparameterized action in (-1, 1) and its log-probability `[B]`; `eps` is the
        standard-normal draw to use (exploration's colored noise), a fresh one if None."""
        h = self.trunk(obs["policy"])
        mean = self.mean(h)
        log_std = self.log_std(h).clamp(LOG_STD_MIN, LOG_STD_MAX)
        std = log_std.exp()
        u = mean + std * (torch.randn_like(mean) if eps is None else eps)
        action = torch.tanh(u)
        # log N(u; mean, std) - sum log(1 - tanh(u)^2), the latter written stably
        z = (u - mean) / std
        log_prob = (-0.5 * z.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return action, log_prob

    def log_prob(self, obs: dict, action: torch.Tensor) -> torch.Tensor:
        """log pi(action|obs) `[B]` of given actions in (-1, 1) (clipped away from +-1 to invert
        the tanh)."""
        h = self.trunk(obs["policy"])
        mean = self.mean(h)
        log_std = self.log_std(h).clamp(LOG_STD_MIN, LOG_STD_MAX)
        u = torch.atanh(action.clamp(-0.999999, 0.999999))
        z = (u - mean) / log_std.exp()
        log_prob = (-0.5 * z.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        return log_prob - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)


class Critic(nn.Module):
    """K independent Q(s, a) heads evaluated in one call: returns `[K, B]`."""

    def __init__(self, obs_dim: int, act_dim: int, hidden=(256, 256), num_critics: int = 2):
        super().__init__()
        self.q = EnsembleMLP(num_critics, obs_dim + act_dim, hidden, 1)

    def forward(self, obs: dict, act: torch.Tensor) -> torch.Tensor:
        return self.q(torch.cat([obs["policy"], act], -1)).squeeze(-1)


def critic_loss(actor, critic, critic_t, gamma: float, b, alpha: torch.Tensor):
    """Importance-weighted squared TD error of both critics against the soft target
    r + gamma * (1 - terminated) * (min_k Q'_k(s', a') - alpha * log pi(a'|s')), a' ~ pi(.|s')."""
    with torch.no_grad():
        next_act, next_logp = actor.sample(b["next_obs"])
        next_q = critic_t(b["next_obs"], next_act).min(0).values - alpha * next_logp
        target = b["rewards"] + gamma * (1.0 - b["terminated"]) * next_q
    q = critic(b["obs"], b["actions"])  # [2, B]
    td = q - target
    return (b["weights"] * td.square()).mean(0).sum(), td.detach().abs().mean(0)


def actor_loss(actor: Actor, critic: Critic, b, alpha: torch.Tensor):
    """E[alpha * log pi(a|s) - min_k Q_k(s, a)], a ~ pi(.|s) reparameterized; and log pi."""
    action, logp = actor.sample(b["obs"])
    q = critic(b["obs"], action).min(0).values
    return (alpha * logp - q).mean(), logp.detach()


def h_term_loss(logp, mask, returns_norm, gamma: float, lam: float):
    """The H-term on `[B, K]` windows: H_b = sum_k gamma^k log pi(a_k|s_k) (masked past an episode's
    end), and loss = -lam * mean_b(H_b * normalized return of b's episode): the actor raises the
    discounted log-likelihood of good trajectories and lowers that of poor ones (a trajectory-level
    REINFORCE with a return baseline)."""
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
    critic_t = Critic(obs_dim, act_dim, args.hidden).to(device)
    critic_t.load_state_dict(critic.state_dict())
    capture = args.capture and not (args.per or args.compile)  # see learn()
    # compiled on CUDA (graphs): Adam's step counter on the device; CPU: one fused kernel
    capturable = (args.compile or capture) and device.type == "cuda"
    adam_kw = dict(capturable=True) if capturable else dict(fused=device.type == "cpu")
    actor_opt = torch.optim.Adam(actor.parameters(), lr=args.actor_lr, **adam_kw)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=args.critic_lr, **adam_kw)
    # learned scalars: shape (1,)
    log_alpha = nn.Parameter(torch.full((1,), math.log(args.init_alpha), device=device))
    alpha_opt = torch.optim.Adam([log_alpha], lr=args.alpha_lr, **adam_kw)
    target_entropy = -float(act_dim)
    # --compile, else as they are
    c_loss_fn, a_loss_fn = run.compile(critic_loss), run.compile(actor_loss)
    act_fn = run.compile(actor.sample)
    actor_step = run.compile(actor_opt.step, graphs=False)
    critic_step = run.compile(critic_opt.step, graphs=False)
    alpha_step = run.compile(alpha_opt.step, graphs=False)
    params_t, params = list(critic_t.parameters()), list(critic.parameters())

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
    # an episode must fit the store whole to be ranked: by default it holds the env's time limit
    # (a limit past 4,096 steps is a guard, as MinAtar's 10,000, more than an episode's length)
    limit = getattr(env, "max_episode_steps", None) or 0
    horizon = args.h_term_horizon or min(max(1024, limit), 4096)
    episodes = args.h_term_max_episodes
    store = TrajectoryStore(N, horizon, obs, (act_dim,), torch.float32, episodes, device)
    # the deployable policy: normalizer, actor, action scaling (common/policy.py)
    policy = Policy.of(actor, net, env)
    # the state a checkpoint holds and a resumed run restores, named once
    state = dict(actor=actor, critic=critic, critic_target=critic_t, actor_opt=actor_opt)
    state.update(critic_opt=critic_opt, alpha_opt=alpha_opt, buffer=rb, env=env, noise=noise)
    state.update(log_alpha=log_alpha, next_obs=obs)
    state.update(h_store=store, h_opt=h_opt)
    run.start(env, state, policy)
    guard = run.guard
    meter = run.meter("critic_loss", "actor_loss")

    def metrics() -> dict:  # logged with the meter's means
        share = h_time / max(loop_time, 1e-9)
        return dict(h_term_time_share=share, alpha=log_alpha.exp().item())

    def learn():
        """The `gradient_steps` updates of one vectorized step.

        On CUDA (`--capture`, the default) they are one CUDA graph, recorded once and replayed
        each step (common/graphs.py): they read and write fixed tensors in place (the buffer and
        its fill, parameters, capturable Adams' moments, the meter's sums, the guard's flag) and
        never wait for the host. Left eager with prioritized replay (its beta moves each step)
        and with `--compile` (its own graphs)."""
        for _ in range(args.gradient_steps):
            b = rb.sample(args.batch_size, beta=beta)
            alpha = log_alpha.detach().exp()
            c_loss, td_abs = c_loss_fn(actor, critic, critic_t, args.gamma, b, alpha)
            meter.add(critic_loss=c_loss)
            guard.watch("critic loss", c_loss)
            critic_opt.zero_grad()
            c_loss.backward()
            critic_step()
            guard.watch_params("parameters", critic)  # before the actor loss reads it
            rb.update_priorities(b["indices"], td_abs)
            a_loss, logp = a_loss_fn(actor, critic, b, alpha)
            meter.add(actor_loss=a_loss)
            guard.watch("actor loss", a_loss)
            actor_opt.zero_grad()
            a_loss.backward(inputs=list(actor.parameters()))  # not the critic's: unused
            actor_step()
            if args.autotune:  # alpha follows the entropy target
                alpha_loss = -(log_alpha * (logp + target_entropy)).mean()
                alpha_opt.zero_grad()
                alpha_loss.backward()
                alpha_step()
            with torch.no_grad():
                for p_t, p in zip(params_t, params):  # Polyak averaging of the target
                    p_t.lerp_(p, args.tau)
            guard.watch_params("parameters", actor)  # the critic: checked after its step
            guard.watch("parameters", log_alpha)

    update = run.capture(
        learn, [rb, guard, meter, actor_opt, critic_opt, alpha_opt], enabled=capture
    )
    for iteration in run.iterations(num_iterations, N, metrics, args.learning_starts):
        t_iter = time.perf_counter()
        # ---- explore: sample the policy, uniform actions before learning_starts ------------------
        with torch.no_grad():
            if run.step < args.learning_starts:
                actions = torch.rand(N, act_dim, device=device) * 2 - 1
            else:
                actions = act_fn(obs, noise.sample())[0]
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
            logp = actor.log_prob(w_obs.flatten(), w_act.reshape(B * K, act_dim))
            h_args = args.h_term_gamma, args.h_term_lambda
            h_loss = h_term_loss(logp.reshape(B, K), w_mask, w_ret, *h_args)
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
