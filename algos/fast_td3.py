"""FastTD3 on vectorized environments.

FastTD3 (Seo et al., 2025, arXiv:2505.22642) is `algos/td3.py` (clipped double Q, delayed policy,
target smoothing) for massively parallel simulation: many sub-envs fill the replay buffer, and
large minibatches with several updates per vectorized step keep the learner up with them. Two
changes make that regime sample-efficient:
1. n-step returns: a stored transition sums `n_step` discounted rewards (stopping where the episode
   ends) and bootstraps with gamma^k from the state k steps on (k <= n_step; no bootstrap after a
   termination, from the true last state after a truncation);
2. mixed exploration noise: each sub-env draws its own noise std uniformly from
   [`noise_min`, `noise_max`] at every episode start, so one batch of sub-envs mixes near-greedy
   and exploratory behaviour.
The paper's distributional (C51) critic is not used here: twin scalar critics, as in TD3.

Actions live in [-1, 1] and are rescaled to the env's bounds by `RescaleAction`. `--per` switches
to proportional prioritized replay.

    python algos/fast_td3.py --env HalfCheetah
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from common.buffers import PrioritizedReplayBuffer, ReplayBuffer
from common.cli import Count, Count0, Frac, Layers, NonNeg, Rate, RunArgs, Unit, cli, task_defaults
from common.ensemble import EnsembleMLP
from common.errors import UserError
from common.noise import ColoredNoise
from common.policy import Policy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent
from common.wrappers import RunningMeanStd, wrap_env

ALGO = "fast_td3"
PARENT, FAMILY = "td3", "DDPG/TD3/SAC"  # its lineage (CONTRIBUTING.md)


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    env: str = "Pendulum-v1"  # an env id with a Box action space
    num_envs: int = 32  # number of parallel sub-environments
    total_steps: Count = 1_000_000  # total environment steps (summed over sub-envs)
    eval_every: Count0 = 50_000  # evaluate the policy every this many env steps (0: at the end)
    save_every: Count0 = 200_000  # write the checkpoint every this many env steps (0: at the end)
    compile: bool = False  # torch.compile the losses, the optimizer steps and the policy step
    capture: bool = True  # on CUDA, a step's updates as one CUDA graph (not with --per, --compile)

    # FastTD3
    buffer_size: Count = 1_000_000  # replay buffer capacity (transitions)
    batch_size: Count = 1024  # minibatch size of each update
    actor_lr: Rate = 3e-4  # Adam learning rate of the actor
    critic_lr: Rate = 3e-4  # Adam learning rate of the critic
    gamma: Unit = 0.99  # discount factor
    tau: Frac = 0.005  # target networks' Polyak rate
    noise_min: NonNeg = 0.001  # smallest per-sub-env exploration noise std (actions in [-1, 1])
    noise_max: NonNeg = 0.4  # largest per-sub-env std (each drawn uniformly at every episode start)
    # exploration noise color (common/noise.py): 0 white (i.i.d. each step), 1 pink, 2 red;
    # correlated noise wanders further, which tasks with a distant reward need
    noise_color: float = 0.0
    n_step: Count = 3  # rewards summed per stored transition (n-step return)
    policy_delay: Count = 2  # critic updates per actor (and target) update
    target_noise: NonNeg = 0.2  # std of the target policy smoothing noise
    noise_clip: NonNeg = 0.5  # clip of the target policy smoothing noise
    learning_starts: Count0 = 10_000  # environment steps of uniform random actions before learning
    gradient_steps: Count = 4  # updates after each vectorized step (UTD: gradient_steps / num_envs)
    hidden: Layers = (256, 256)  # hidden layer sizes of actor and critic
    # normalize observations with running statistics; the buffer keeps raw observations and each
    # sampled batch is normalized with the current statistics
    norm_obs: bool = True
    per: bool = False  # proportional prioritized experience replay
    per_alpha: Unit = 0.6  # PER priority exponent
    per_beta: Unit = 0.4  # PER initial importance-sampling exponent (annealed to 1)


# Per-task defaults over the ones above, from held-out sweeps (bench/sweep.py;
# bench/NOTES.md#defaults-the-evidence); `--env X --help` lists them
# fmt: off
TASK_DEFAULTS = {
    # td3's rows, checked on this file: Pendulum with batch 256 and raw observations; MountainCar
    # with one noise std (0.5) for every sub-env, 4 envs x 4 updates, batch 256
    "Pendulum-v1": dict(hidden=(64, 64), learning_starts=1_000, total_steps=20_000, tau=0.05,
                        actor_lr=3e-3, critic_lr=3e-3, batch_size=256, norm_obs=False),
    "MountainCarContinuous-v0": dict(hidden=(64, 64), noise_color=1.0, noise_min=0.5, noise_max=0.5,
                                     num_envs=4, gradient_steps=4, batch_size=256,
                                     learning_starts=1_000, total_steps=50_000),
}
# fmt: on
default_args = task_defaults(Args, TASK_DEFAULTS)


def check_args(args: Args, env) -> None:  # (each field's own range: common.cli.check_ranges)
    check_single_agent(env, args.env, ALGO, flat=True)
    if not isinstance(env.single_action_space, gym.spaces.Box):
        raise UserError(
            f"{ALGO} needs a continuous (Box) action space (Discrete: dqn.py, ppo_vec.py)"
        )
    if args.noise_min > args.noise_max:
        raise UserError(f"--noise-min {args.noise_min} > --noise-max {args.noise_max}")
    if args.buffer_size < args.num_envs:
        raise UserError(f"--buffer-size must hold one vectorized step ({args.num_envs})")
    if args.learning_starts < args.n_step * args.num_envs:  # the buffer's first rows come then
        raise UserError("--learning-starts must be at least --n-step x --num-envs")


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


class NStepWindow:
    """The last `n` vectorized steps. Once full, each `push` returns the n-step transition of the
    step that leaves the window, for every sub-env: (s_t, a_t, R = sum_{j<k} gamma^j r_{t+j},
    s_{t+k}, gamma^k (1 - terminated)), where k <= n stops at the first step that ended the
    episode."""

    def __init__(self, n: int, gamma: float):
        self.n, self.gamma, self.steps = n, gamma, []

    def push(self, obs, actions, reward, final_obs, terminated, done):
        self.steps.append((obs, actions, reward, final_obs, terminated, done))
        if len(self.steps) < self.n:
            return None
        obs0, act0 = self.steps[0][:2]
        ret, alive = torch.zeros_like(reward), torch.ones_like(done)
        boot, discount = self.steps[-1][3], torch.zeros_like(reward)
        for j, (_, _, r, nxt, term, d) in enumerate(self.steps):
            ret = ret + alive * self.gamma**j * r
            # the episode's end, or s_{t+n}
            boot = {k: torch.where((alive & d)[:, None], x, boot[k]) for k, x in nxt.items()}
            last = alive & (d | (j == self.n - 1))
            discount = torch.where(last, self.gamma ** (j + 1) * (1.0 - term.float()), discount)
            alive = alive & ~d
        self.steps.pop(0)
        return obs0, act0, ret, boot, discount

    def state_dict(self) -> dict:  # observations as plain dicts
        return {
            "steps": [tuple(dict(x) if isinstance(x, dict) else x for x in s) for s in self.steps]
        }

    def load_state_dict(self, sd: dict) -> None:
        self.steps = list(sd["steps"])


def critic_loss(actor_t, critic, critic_t, discount, b, target_noise: float, noise_clip: float):
    """Importance-weighted squared TD error of both critics against the n-step target
    R + gamma^k (1 - terminated) * min_k Q'_k(s_{t+k}, clip(mu'(s_{t+k}) + clip(noise))), with
    `discount` the batch's gamma^k (1 - terminated) and its observations normalized."""
    with torch.no_grad():
        noise = (torch.randn_like(b["actions"]) * target_noise).clamp(-noise_clip, noise_clip)
        next_act = (actor_t(b["next_obs"]) + noise).clamp(-1.0, 1.0)
        next_q = critic_t(b["next_obs"], next_act).min(0).values
        target = b["rewards"] + discount * next_q
    q = critic(b["obs"], b["actions"])  # [2, B]
    td = q - target
    return (b["weights"] * td.square()).mean(0).sum(), td.detach().abs().mean(0)


def actor_loss(actor: Actor, critic: Critic, b):
    """-Q_1(s, mu(s)): the first critic alone, as the paper (the second is not evaluated)."""
    return -critic(b["obs"], actor(b["obs"]), members=slice(0, 1))[0].mean()


def make_env(args: Args, device, seed: int):
    import envs  # here, not at the top: a checkpoint's policy loads without the env package

    env = envs.make(args.env, args.num_envs, device, seed, backend=args.mujoco_backend)
    # raw observations: normalized in main() (--norm-obs)
    return wrap_env(env, gamma=args.gamma, groups=True)


def main(args: Args) -> dict:
    run = Run(ALGO, args, defaults=default_args)  # device, --resume (with its settings), seeds
    args, device = run.args, run.device
    env = make_env(args, device, args.seed)
    check_args(args, env)
    obs_space, act_space = env.single_observation_space["policy"], env.single_action_space
    obs_dim, act_dim = int(np.prod(obs_space.shape)), int(np.prod(act_space.shape))
    obs_rms = RunningMeanStd(obs_space.shape, device) if args.norm_obs else None

    def norm(obs):  # with the statistics of now, also for observations stored long ago
        return Batch(obs, policy=obs_rms.normalize(obs["policy"])) if obs_rms is not None else obs

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
    discounts = torch.zeros(args.buffer_size, device=device)  # gamma^k (1 - terminated) of each row
    window = NStepWindow(args.n_step, args.gamma)
    # --compile, else as they are
    c_loss_fn, a_loss_fn = run.compile(critic_loss), run.compile(actor_loss)
    act_fn = run.compile(actor)
    actor_step = run.compile(actor_opt.step, graphs=False)
    critic_step = run.compile(critic_opt.step, graphs=False)
    params_t = list(actor_t.parameters()) + list(critic_t.parameters())
    params = list(actor.parameters()) + list(critic.parameters())

    N = args.num_envs
    noise = ColoredNoise(args.noise_color, (N, act_dim), device=device)
    num_iterations = args.total_steps // N
    obs = Batch(env.reset(seed=args.seed)[0]).clone()  # where the next step starts: a fixed buffer
    # replay rows shaped and typed as one vectorized step's observation and actions
    rb_args = (args.buffer_size, obs, torch.zeros(N, act_dim, device=device))
    if args.per:
        rb = PrioritizedReplayBuffer(*rb_args, alpha=args.per_alpha)
    else:
        rb = ReplayBuffer(*rb_args)
    if obs_rms is not None:
        obs_rms.update(obs["policy"])
    noise_std = args.noise_min + (args.noise_max - args.noise_min) * torch.rand(N, 1, device=device)
    # the deployable policy: normalizer, actor, action scaling (common/policy.py)
    policy = Policy.of(actor, net, env, obs_norm=obs_rms)
    # the state a checkpoint holds and a resumed run restores, named once
    state = dict(actor=actor, critic=critic, actor_target=actor_t, critic_target=critic_t)
    state.update(actor_opt=actor_opt, critic_opt=critic_opt, buffer=rb, env=env)
    state.update(window=window, noise=noise, next_obs=obs, noise_std=noise_std, obs_norm=obs_rms)

    def extra():  # the stored rows' discounts travel with the buffer
        return dict(discounts=discounts[: len(rb)])

    run.start(env, state, policy, extra=extra)
    guard = run.guard
    if run.ckpt:
        discounts[: len(rb)] = run.ckpt["discounts"]  # the stored rows' discounts
    meter = run.meter("critic_loss", "actor_loss")
    iterations = run.iterations(num_iterations, N, learning_starts=args.learning_starts)

    def learn(start: int):
        """The `gradient_steps` updates of one vectorized step, `start` updates into the actor's
        cycle: the actor and the targets follow every `policy_delay`-th critic update.

        On CUDA (`--capture`, the default) they are one CUDA graph, recorded once and replayed
        each step (common/graphs.py): they read and write fixed tensors in place (the buffer and
        its fill, parameters, capturable Adams' moments, the meter's sums, the guard's flag) and
        never wait for the host. A graph replays the same updates each call: where the actor's
        turns move from step to step (`gradient_steps` not a multiple of `policy_delay`: UTD 1
        and a delay of 2 gives the actor every other step) there is a graph for each `start`;
        it is left eager where the updates differ from call to call: prioritized replay (its
        beta moves) and `--compile` (its own graphs)."""
        for k in range(1, args.gradient_steps + 1):
            b = rb.sample(args.batch_size, beta=beta)
            b["obs"], b["next_obs"] = norm(b["obs"]), norm(b["next_obs"])
            smoothing = args.target_noise, args.noise_clip
            gamma_k = discounts[b["indices"]]
            c_loss, td_abs = c_loss_fn(actor_t, critic, critic_t, gamma_k, b, *smoothing)
            meter.add(critic_loss=c_loss)
            guard.watch("critic loss", c_loss)
            critic_opt.zero_grad()
            c_loss.backward()
            critic_step()
            guard.watch_params("parameters", critic)  # before the actor loss reads it
            rb.update_priorities(b["indices"], td_abs)
            if (start + k) % args.policy_delay == 0:  # delayed actor and target updates
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

    written = [rb, guard, meter, actor_opt, critic_opt]
    updates = [  # one per place in the actor's cycle a step can start at (see learn())
        run.capture(partial(learn, start), written, enabled=capture)
        for start in range(args.policy_delay)
    ]
    for iteration in iterations:
        # ---- explore: mu(s) + per-sub-env Gaussian noise, uniform actions before learning_starts
        with torch.no_grad():
            if run.step < args.learning_starts:
                actions = torch.rand(N, act_dim, device=device) * 2 - 1
            else:
                actions = act_fn(norm(obs))
                actions = (actions + noise_std * noise.sample()).clamp(-1, 1)
        next_obs, reward, terminated, truncated, info = env.step(actions)
        if obs_rms is not None:
            obs_rms.update(next_obs["policy"])
        done = terminated | truncated
        fresh = args.noise_min + (args.noise_max - args.noise_min) * torch.rand(N, 1, device=device)
        noise_std.copy_(torch.where(done[:, None], fresh, noise_std))  # a new std for a new episode
        transition = window.push(obs.clone(), actions, reward, info["final_obs"], terminated, done)
        if transition is not None:
            *stored, discount = transition
            discounts[rb.add(*stored, terminated=discount == 0)] = discount
        obs.copy_(next_obs)
        step = run.step + N  # env steps so far, this one's included
        guard.check(step)

        # ---- learn -------------------------------------------------------------------------------
        if step >= args.learning_starts:
            beta = args.per_beta + (1.0 - args.per_beta) * min(1.0, step / args.total_steps)
            updates[run.updates % args.policy_delay]()
            run.updates += args.gradient_steps
            guard.check(step)
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: normalization, the
    deterministic actor, action rescaling), rebuilt without an env."""
    return Policy.restore(path, ALGO, Actor, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
