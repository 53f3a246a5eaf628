"""ModSAC: SAC whose policy-update frequency follows the critic's loss.

`algos/sac.py` with one change, after ElegantRL's ModSAC ("a small critic loss leads to a high
policy-update frequency and vice versa", in the spirit of TD3's delayed policy updates). The actor
exploits the critics, so it should move fast only while they are accurate. We measure accuracy
relative to the critics' own history, which makes the rule independent of the reward scale:

    fast = EMA(critic loss, rate 1 - mod_fast_decay)      # now
    slow = EMA(critic loss, rate 1 - mod_slow_decay)      # the long-run level
    policy_delay = clamp(round(1 + mod_gain * (fast / slow - 1)), 1, mod_max_delay)

Every `mod_period` updates (one host sync there, none in between) the integer delay is refreshed;
the actor and temperature are then updated once every `policy_delay` critic updates. While the
critic loss sits at or below its long-run level (the critics track the data) the actor updates
every step, as in SAC; when it rises above it (new data the critics do not fit yet, a moving
target after a policy jump) the actor waits: with the default gain 4, a loss 25% above its
long-run level gives one actor update per two critic updates, up to `mod_max_delay`.

    python algos/modsac.py --env Pendulum-v1
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from common.buffers import PrioritizedReplayBuffer, ReplayBuffer
from common.cli import Count, Count0, Frac, Layers, Rate, RunArgs, Unit, cli, task_defaults
from common.ensemble import EnsembleMLP
from common.errors import UserError
from common.noise import ColoredNoise
from common.policy import Policy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent
from common.wrappers import wrap_env

ALGO = "modsac"
PARENT, FAMILY = "sac", "DDPG/TD3/SAC"  # its lineage (CONTRIBUTING.md)


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    env: str = "Pendulum-v1"  # an env id with a Box action space
    num_envs: int = 4  # number of parallel sub-environments
    total_steps: Count = 40_000  # total environment steps (summed over sub-envs)
    eval_every: Count0 = 10_000  # evaluate the policy every this many env steps (0: at the end)
    save_every: Count0 = 20_000  # write the checkpoint every this many env steps (0: at the end)
    compile: bool = False  # torch.compile the losses, the optimizer steps and the policy step

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
    mod_fast_decay: float = 0.9  # decay of the short-term EMA of the critic loss
    mod_slow_decay: float = 0.995  # decay of the long-run EMA of the critic loss
    # policy delay grows by this much per unit of relative excess critic loss (fast / slow - 1)
    mod_gain: float = 4.0
    mod_max_delay: Count = 8  # largest number of critic updates per actor update
    # updates between refreshes of the policy delay (each refresh is one host sync)
    mod_period: Count = 64
    learning_starts: Count0 = 2_000  # environment steps of uniformly random actions before learning
    gradient_steps: Count = 4  # updates after each vectorized step (UTD: gradient_steps / num_envs)
    hidden: Layers = (256, 256)  # hidden layer sizes of actor and critic
    norm_obs: bool = False  # normalize observations with running statistics
    per: bool = False  # proportional prioritized experience replay
    per_alpha: Unit = 0.6  # PER priority exponent
    per_beta: Unit = 0.4  # PER initial importance-sampling exponent (annealed to 1)


# Per-task defaults over the ones above (`--env X --help` lists them): classic control from
# held-out sweeps (bench/sweep.py; bench/NOTES.md#defaults-the-evidence); MuJoCo and Box2D the
# published settings the benchmark reproduces (bench/experiments.py: groups box2d, mujoco-offpolicy)
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
    if not (0 < args.mod_fast_decay < 1 and 0 < args.mod_slow_decay < 1):
        raise UserError("--mod-fast-decay and --mod-slow-decay must be in (0, 1)")
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
    # compiled on CUDA (graphs): Adam's step counter on the device; CPU: one fused kernel
    capturable = args.compile and device.type == "cuda"
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
    num_iterations = args.total_steps // N
    loss_ema = torch.zeros(2, device=device)  # [fast, slow] EMAs of the critic loss
    ema_decay = torch.tensor([args.mod_fast_decay, args.mod_slow_decay], device=device)
    policy_delay = 1
    obs = Batch(env.reset(seed=args.seed)[0]).clone()  # where the next step starts: a fixed buffer
    # replay rows shaped and typed as one vectorized step's observation and actions
    rb_args = (args.buffer_size, obs, torch.zeros(N, act_dim, device=device))
    if args.per:
        rb = PrioritizedReplayBuffer(*rb_args, alpha=args.per_alpha)
    else:
        rb = ReplayBuffer(*rb_args)
    # the deployable policy: normalizer, actor, action scaling (common/policy.py)
    policy = Policy.of(actor, net, env)
    # the state a checkpoint holds and a resumed run restores, named once
    state = dict(actor=actor, critic=critic, critic_target=critic_t, actor_opt=actor_opt)
    state.update(critic_opt=critic_opt, alpha_opt=alpha_opt, buffer=rb, env=env, noise=noise)
    state.update(log_alpha=log_alpha, loss_ema=loss_ema, next_obs=obs)
    run.start(env, state, policy, extra=lambda: dict(policy_delay=policy_delay))
    guard = run.guard
    # where the adaptive delay stands
    policy_delay = run.ckpt["policy_delay"] if run.ckpt else policy_delay
    meter = run.meter("critic_loss", "actor_loss")

    def metrics() -> dict:  # logged with the meter's means
        return dict(alpha=log_alpha.exp().item(), policy_delay=policy_delay)

    def learn():
        """The `gradient_steps` updates of one vectorized step, eagerly: the policy delay is read
        on the host every `mod_period` updates, which a CUDA graph's replay could not redo."""
        nonlocal policy_delay
        for _ in range(args.gradient_steps):
            b = rb.sample(args.batch_size, beta=beta)
            alpha = log_alpha.detach().exp()
            c_loss, td_abs = c_loss_fn(actor, critic, critic_t, args.gamma, b, alpha)
            meter.add(critic_loss=c_loss)
            guard.watch("critic loss", c_loss)
            critic_opt.zero_grad()
            c_loss.backward()
            critic_step()
            rb.update_priorities(b["indices"], td_abs)
            run.updates += 1
            with torch.no_grad():  # bias-free start: the first loss seeds both EMAs
                c, first = c_loss.detach(), float(run.updates == 1)
                ema = ema_decay * loss_ema + (1 - ema_decay) * c
                loss_ema.copy_(first * c + (1 - first) * ema)
            if run.updates % args.mod_period == 0:  # refresh the delay: one host sync
                guard.check(step, sync=True)  # a NaN loss is named here, not by round() below
                fast, slow = loss_ema.tolist()
                delay = round(1 + args.mod_gain * (fast / max(slow, 1e-12) - 1.0))
                policy_delay = int(min(max(delay, 1), args.mod_max_delay))
            if run.updates % policy_delay == 0:  # the actor and temperature wait for the critics
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
            guard.watch_params("parameters", [actor, critic])
            guard.watch("parameters", log_alpha)  # a plain tensor, not in a module

    for iteration in run.iterations(num_iterations, N, metrics, args.learning_starts):
        # ---- explore: sample the policy, uniform actions before learning_starts ------------------
        with torch.no_grad():
            if run.step < args.learning_starts:
                actions = torch.rand(N, act_dim, device=device) * 2 - 1
            else:
                actions = act_fn(obs, noise.sample())[0]
        next_obs, reward, terminated, truncated, info = env.step(actions)
        rb.add(obs, actions, reward, info["final_obs"], terminated)
        obs.copy_(next_obs)
        step = run.step + N  # env steps so far, this one's included
        guard.check(step)

        # ---- learn -------------------------------------------------------------------------------
        if step >= args.learning_starts:
            beta = args.per_beta + (1.0 - args.per_beta) * min(1.0, step / args.total_steps)
            learn()
            guard.check(step)
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: normalization, the
    deterministic actor, action rescaling), rebuilt without an env."""
    return Policy.restore(path, ALGO, Actor, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
