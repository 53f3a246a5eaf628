"""REDQ: randomized ensembled double Q-learning, on vectorized environments.

REDQ (Chen, Wang, Zhou & Ross, 2021, arXiv:2101.05982) is `algos/sac.py` with three changes that
allow a high update-to-data ratio without a model:
1. an ensemble of N critics (`num_critics`, default 10), one batched `EnsembleMLP` evaluated in a
   single call (learner parallelism: no Python loop over critics);
2. in-target minimization over a random subset: the soft TD target takes the minimum of M
   (`num_min`, default 2) target critics drawn afresh for every update, and all N critics
   regress on that one target;
3. update-to-data ratio G > 1: `utd` critic updates (each on a fresh batch) per policy update;
   the policy maximizes the *mean* of all N critics minus alpha * log pi.
The temperature is learned as in SAC. Only the M drawn target critics are evaluated for the target,
and the policy's backward takes dQ/da through the N critics without their weight gradients.

The dataclass defaults below ((128, 128) networks, 6k env steps, N = 10, M = 2, G = 5) are for tasks
without a row in TASK_DEFAULTS; Pendulum-v1's row (64x64, 8 envs, G = 1, 20k steps) replaces some of
them, and `--env X --help` shows what a task gets. The paper's MuJoCo setting is
`--hidden 256 256 --utd 20`.

    python algos/redq.py --env Pendulum-v1
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

ALGO = "redq"
PARENT, FAMILY = "sac", "DDPG/TD3/SAC"  # its lineage (CONTRIBUTING.md)


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    env: str = "Pendulum-v1"  # an env id with a Box action space
    num_envs: int = 4  # number of parallel sub-environments
    total_steps: Count = 6_000  # total environment steps (summed over sub-envs)
    eval_every: Count0 = 1_000  # evaluate the policy every this many env steps (0: at the end)
    save_every: Count0 = 2_000  # write the checkpoint every this many env steps (0: at the end)
    compile: bool = False  # torch.compile the losses, the optimizer steps and the policy step
    capture: bool = True  # on CUDA, a step's updates as one CUDA graph (not with --per, --compile)

    # REDQ
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
    num_critics: Count = 10  # N: critics in the ensemble
    num_min: Count = 2  # M: size of the random subset the target minimizes over
    utd: Count = 5  # G: critic updates per policy update (the paper uses 20)
    learning_starts: Count0 = 1_000  # environment steps of uniformly random actions before learning
    # policy updates after each vectorized step, each after `utd` critic updates
    # (UTD: gradient_steps * utd / num_envs)
    gradient_steps: Count = 4
    hidden: Layers = (128, 128)  # hidden layer sizes of actor and critic
    norm_obs: bool = False  # normalize observations with running statistics
    per: bool = False  # proportional prioritized experience replay
    per_alpha: Unit = 0.6  # PER priority exponent
    per_beta: Unit = 0.4  # PER initial importance-sampling exponent (annealed to 1)


# Per-task defaults over the ones above (`--env X --help` lists them): classic control from
# held-out sweeps (bench/sweep.py; bench/NOTES.md#defaults-the-evidence); MuJoCo and Box2D the
# published settings the benchmark reproduces (bench/experiments.py: groups box2d, mujoco-offpolicy)
# fmt: off
TASK_DEFAULTS = {
    "Pendulum-v1": dict(hidden=(64, 64), num_envs=8, learning_starts=1_000, total_steps=20_000,
                        tau=0.02, actor_lr=3e-3, critic_lr=3e-3, utd=1),
    # a fixed temperature: a tuned one shrinks the policy's std before some seeds find the flag
    "MountainCarContinuous-v0": dict(hidden=(64, 64), noise_color=1.0, autotune=False,
                                     init_alpha=0.5, utd=1, total_steps=50_000),
    # MuJoCo v5: the paper's setting (N = 10, M = 2, G = 20, 256 x 256, 3e-4) and budget
    **{t: dict(num_envs=1, gradient_steps=1, utd=20, hidden=(256, 256),
               learning_starts=5_000, actor_lr=3e-4, critic_lr=3e-4, alpha_lr=3e-4,
               total_steps=300_000, eval_every=10_000, save_every=25_000)
       for t in ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5")},
}
# fmt: on
default_args = task_defaults(Args, TASK_DEFAULTS)


def check_args(args: Args, env) -> None:  # (each field's own range: common.cli.check_ranges)
    check_single_agent(env, args.env, ALGO, flat=True)
    if not isinstance(env.single_action_space, gym.spaces.Box):
        raise UserError(
            f"{ALGO} needs a continuous (Box) action space (Discrete: dqn.py, ppo_vec.py)"
        )
    if not 1 <= args.num_min <= args.num_critics:
        n, m = args.num_critics, args.num_min
        raise UserError(f"--num-min {m} must be between 1 and --num-critics {n}")
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

    def __init__(self, obs_dim: int, act_dim: int, hidden=(256, 256), num_critics: int = 10):
        super().__init__()
        self.q = EnsembleMLP(num_critics, obs_dim + act_dim, hidden, 1)

    def forward(self, obs: dict, act: torch.Tensor, members=None) -> torch.Tensor:
        return self.q(torch.cat([obs["policy"], act], -1), members).squeeze(-1)


def critic_loss(actor, critic, critic_t, gamma: float, b, alpha: torch.Tensor, num_min: int):
    """Importance-weighted squared TD error of all N critics against the soft target
    r + gamma * (1 - terminated) * (min_{k in K} Q'_k(s', a') - alpha * log pi(a'|s')),
    a' ~ pi(.|s'), K a random subset of M target critics."""
    with torch.no_grad():
        next_act, next_logp = actor.sample(b["next_obs"])
        subset = torch.randperm(critic_t.q.k, device=next_act.device)[:num_min]  # M of N evaluated
        next_q = critic_t(b["next_obs"], next_act, subset).min(0).values - alpha * next_logp
        target = b["rewards"] + gamma * (1.0 - b["terminated"]) * next_q
    q = critic(b["obs"], b["actions"])  # [2, B]
    td = q - target
    return (b["weights"] * td.square()).mean(0).sum(), td.detach().abs().mean(0)


def actor_loss(actor: Actor, critic: Critic, b, alpha: torch.Tensor):
    """E[alpha * log pi(a|s) - mean_k Q_k(s, a)], a ~ pi(.|s) reparameterized; and log pi."""
    action, logp = actor.sample(b["obs"])
    q = critic(b["obs"], action).mean(0)
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
    critic = Critic(obs_dim, act_dim, args.hidden, args.num_critics).to(device)
    critic_t = Critic(obs_dim, act_dim, args.hidden, args.num_critics).to(device)
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
    num_iterations = args.total_steps // N
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
    state.update(log_alpha=log_alpha, next_obs=obs)
    run.start(env, state, policy)
    guard = run.guard
    meter = run.meter("critic_loss", "actor_loss")

    def metrics() -> dict:  # logged with the meter's means
        return dict(alpha=log_alpha.exp().item())

    def learn():
        """The `gradient_steps` updates of one vectorized step.

        On CUDA (`--capture`, the default) they are one CUDA graph, recorded once and replayed
        each step (common/graphs.py): they read and write fixed tensors in place (the buffer and
        its fill, parameters, capturable Adams' moments, the meter's sums, the guard's flag) and
        never wait for the host. Left eager with prioritized replay (its beta moves each step)
        and with `--compile` (its own graphs)."""
        for _ in range(args.gradient_steps):
            alpha = log_alpha.detach().exp()
            for _ in range(args.utd):  # G critic updates, each on a fresh batch
                b = rb.sample(args.batch_size, beta=beta)
                target = args.gamma, b, alpha, args.num_min
                c_loss, td_abs = c_loss_fn(actor, critic, critic_t, *target)
                meter.add(critic_loss=c_loss)
                guard.watch("critic loss", c_loss)
                critic_opt.zero_grad()
                c_loss.backward()
                critic_step()
                rb.update_priorities(b["indices"], td_abs)
                with torch.no_grad():
                    for p_t, p in zip(params_t, params):  # Polyak averaging of the target
                        p_t.lerp_(p, args.tau)
            critic.requires_grad_(False)  # the policy's backward needs dQ/da, not weight grads
            a_loss, logp = a_loss_fn(actor, critic, b, alpha)
            meter.add(actor_loss=a_loss)
            guard.watch("actor loss", a_loss)
            actor_opt.zero_grad()
            a_loss.backward(inputs=list(actor.parameters()))  # not the critic's: unused
            critic.requires_grad_(True)
            actor_step()
            if args.autotune:  # alpha follows the entropy target
                alpha_loss = -(log_alpha * (logp + target_entropy)).mean()
                alpha_opt.zero_grad()
                alpha_loss.backward()
                alpha_step()
            guard.watch_params("parameters", [actor, critic])
            guard.watch("parameters", log_alpha)  # a plain tensor, not in a module

    update = run.capture(
        learn, [rb, guard, meter, actor_opt, critic_opt, alpha_opt], enabled=capture
    )
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
            update()
            run.updates += args.gradient_steps
            guard.check(step)
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: normalization, the
    deterministic actor, action rescaling), rebuilt without an env."""
    return Policy.restore(path, ALGO, Actor, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
