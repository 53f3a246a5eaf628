"""MATD3 on vectorized multi-agent environments.

Multi-Agent TD3 (Ackermann et al., 2019, "Reducing Overestimation Bias in Multi-Agent Domains
Using Double Centralized Critics", arXiv:1910.01465) is `algos/maddpg.py` with TD3's three changes
(Fujimoto et al., 2018, arXiv:1802.09477) applied to every agent:
1. clipped double Q-learning: each agent has twin centralized critics Q_{1,i}, Q_{2,i}(s, a_1..a_A)
   (all 2A of them one batched `EnsembleMLP`); agent i's TD target uses the minimum of its two
   target critics, and both regress on it:
       y_i = r_i + gamma * (1 - terminated) * min_k Q'_{k,i}(s', a'_1, ..., a'_A)
2. delayed policy updates: the actors and all target networks are updated once every
   `policy_delay` critic updates;
3. target policy smoothing: every agent's target action is a'_j = clip(mu'_j(o'_j) + clipped
   Gaussian noise) (`target_noise`, clipped to +-`noise_clip`).
Everything else is MADDPG's: decentralized actors mu_i(o_i), actor i ascends its first critic
Q_{1,i}(s, a_1, ..., mu_i(o_i), ..., a_A) with the other agents' actions from the replay buffer
(`--others-from-policy`: their current actions), actions in [-1, 1] mapped onto the env's Box at
the env boundary, one reward per agent, truncation bootstraps from `final_obs` / `final_state`.

    python algos/matd3.py --env simple_spread
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import torch
import torch.nn as nn

import envs
from common.buffers import ReplayBuffer
from common.checkpoint import load_checkpoint
from common.cli import Count, Count0, Frac, Layers, NonNeg, Rate, RunArgs, Unit, cli
from common.ensemble import EnsembleMLP
from common.errors import UserError
from common.evaluate import ma_evaluate
from common.ma_vec_env import MAEpisodeStatistics
from common.noise import ColoredNoise
from common.policy import PolicyFn
from common.run import Run
from common.wrappers import ActionScaler

ALGO = "matd3"
PARENT, FAMILY = "maddpg", "multi-agent"  # its lineage (CONTRIBUTING.md)


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    env: str = "simple_spread"  # a multi-agent env id (made with continuous actions)
    num_envs: int = 16  # parallel worlds
    total_steps: Count = 200_000  # vectorized steps x worlds (a step moves every agent of a world)
    eval_every: Count0 = 50_000  # evaluate the policy every this many env steps (0: at the end)
    eval_episodes: Count = 32  # episodes per evaluation (run in parallel on a separate env)
    save_every: Count0 = 100_000  # write the checkpoint every this many env steps (0: at the end)
    compile: bool = False  # torch.compile the critic and actor updates

    # MATD3
    buffer_size: Count = 1_000_000  # replay capacity (joint transitions, one per world and step)
    batch_size: Count = 1024  # minibatch size of each update
    actor_lr: Rate = 1e-3  # Adam learning rate of the actors
    critic_lr: Rate = 1e-3  # Adam learning rate of the critics
    gamma: Unit = 0.95  # discount factor
    tau: Frac = 0.01  # target networks' Polyak rate
    exploration_noise: NonNeg = 0.1  # std of the Gaussian exploration noise (actions in [-1, 1])
    # exploration noise color beta (common/noise.py): 0 white (i.i.d. each step), 1 pink, 2 red;
    # one correlated sequence per world, agent and action dimension, as in algos/ddpg.py
    noise_color: float = 0.0
    learning_starts: Count0 = 5_000  # environment steps of uniformly random actions before learning
    gradient_steps: Count = 1  # updates after each vectorized step (UTD: gradient_steps / num_envs)
    hidden: Layers = (64, 64)  # hidden layer sizes of every actor and critic
    # actor update: the other agents' actions from their current policies, not the buffer's (paper)
    others_from_policy: bool = False
    policy_delay: Count = 2  # critic updates per actor (and target) update
    target_noise: NonNeg = 0.2  # std of the target policy smoothing noise
    noise_clip: NonNeg = 0.5  # clip of the target policy smoothing noise


def check_args(args: Args, env) -> None:  # (each field's own range: common.cli.check_ranges)
    if not isinstance(space := env.single_action_space, gym.spaces.Box):
        raise UserError(f"{ALGO} needs a continuous (Box) action space; {args.env} has {space}")
    if args.buffer_size < args.num_envs:
        raise UserError(f"--buffer-size must hold one vectorized step ({args.num_envs})")


class Actors(nn.Module):
    """A deterministic actors on their own observations: `[B, A, obs] -> [B, A, act]` in [-1, 1]."""

    def __init__(self, n_agents: int, obs_dim: int, act_dim: int, hidden=(64, 64)):
        super().__init__()
        self.net = EnsembleMLP(n_agents, obs_dim, hidden, act_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs.transpose(0, 1))).transpose(0, 1)


class Critics(nn.Module):
    """K centralized critics per agent, Q_{k,i}(s, a_1..a_A), in one call: returns `[K, A, B]`.

    `state` [B, S] and `actions` [B, A, act] give every critic the same input; `state` [A, B, S] and
    `actions` [A, B, A, act] give critic i (of every k) its own row i (the actor update); `first`:
    the first critic of each agent only, `[1, A, B]` (the actor's loss reads Q_1 alone).
    """

    def __init__(self, n_agents, state_dim, act_dim, hidden=(64, 64), num_critics: int = 2):
        super().__init__()
        self.k, self.n = num_critics, n_agents
        self.q = EnsembleMLP(num_critics * n_agents, state_dim + n_agents * act_dim, hidden, 1)

    def forward(self, state: torch.Tensor, actions: torch.Tensor, first: bool = False):
        k = 1 if first else self.k
        x = torch.cat([state, actions.flatten(-2)], -1)
        if x.dim() == 3:  # per-agent inputs: member k * A + i reads row i
            x = x.expand(k, *x.shape).reshape(k * self.n, *x.shape[1:])
        return self.q(x, slice(0, self.n) if first else None).view(k, self.n, -1)


def unpack(x: torch.Tensor, n_agents: int, state_dim: int):
    """A replay row (all observations, then the state) -> obs [B, A, obs], state [B, S]."""
    return x[:, :-state_dim].unflatten(1, (n_agents, -1)), x[:, -state_dim:]


def critic_loss(actors_t, critics, critics_t, args: Args, b, n_agents: int, state_dim: int):
    """Both critics of each agent against its own target
    r_i + gamma * (1 - terminated) * min_k Q'_{k,i}(s', clip(mu'(o') + clip(noise)))."""
    state = unpack(b["obs"], n_agents, state_dim)[1]
    next_obs, next_state = unpack(b["next_obs"], n_agents, state_dim)
    with torch.no_grad():
        clip = args.noise_clip
        noise = (torch.randn_like(b["actions"]) * args.target_noise).clamp(-clip, clip)
        next_act = (actors_t(next_obs) + noise).clamp(-1.0, 1.0)
        next_q = critics_t(next_state, next_act).min(0).values  # [A, B]
        target = b["rewards"].T + args.gamma * (1.0 - b["terminated"]) * next_q
    q = critics(state, b["actions"])  # [2, A, B]
    td = q - target
    return td.square().mean(-1).sum()


def actor_loss(actors, critics, b, n_agents: int, state_dim: int, others_from_policy: bool):
    """-sum_i mean Q_i(s, a_1, ..., mu_i(o_i), ..., a_A): agent i's own action in row i."""
    obs, state = unpack(b["obs"], n_agents, state_dim)
    mu = actors(obs)  # [B, A, act]
    others = mu.detach() if others_from_policy else b["actions"]
    own = torch.eye(n_agents, dtype=torch.bool, device=mu.device)[:, None, :, None]  # [A, 1, A, 1]
    joint = torch.where(own, mu.unsqueeze(0), others.unsqueeze(0))  # [A, B, A, act]
    q = critics(state.expand(n_agents, *state.shape), joint, first=True)[0]  # [A, B]
    return -q.mean(1).sum()


def make_env(args: Args, device, seed: int):
    if args.env not in envs.MULTI_AGENT:
        ids = ", ".join(envs.MULTI_AGENT)
        one = "single-agent continuous control: algos/ddpg.py, algos/td3.py"
        raise UserError(f"{ALGO} needs a multi-agent env ({ids}); {args.env!r} is not one ({one})")
    kw = dict(num_envs=args.num_envs, device=device, seed=seed, continuous_actions=True)
    return MAEpisodeStatistics(envs.make(args.env, **kw))


def policy_from(actors: Actors, to_env) -> "callable":
    """obs [N, A, obs_dim] (, info) -> deterministic env-native actions [N, A, act_dim]."""

    def core(obs, info=None):
        return to_env(actors(obs))

    return core


def main(args: Args) -> dict:
    run = Run(ALGO, args)  # device, --resume (with its settings), seeds
    args, device = run.args, run.device
    env = make_env(args, device, args.seed)
    check_args(args, env)
    A, obs_dim, state_dim = env.n_agents, env.single_observation_space.shape[0], env.state_dim
    act_dim = env.single_action_space.shape[0]
    actors = Actors(A, obs_dim, act_dim, args.hidden).to(device)
    critics = Critics(A, state_dim, act_dim, args.hidden).to(device)
    actors_t = Actors(A, obs_dim, act_dim, args.hidden).to(device)
    critics_t = Critics(A, state_dim, act_dim, args.hidden).to(device)
    actors_t.load_state_dict(actors.state_dict())
    critics_t.load_state_dict(critics.state_dict())
    actor_opt = torch.optim.Adam(actors.parameters(), lr=args.actor_lr)
    critic_opt = torch.optim.Adam(critics.parameters(), lr=args.critic_lr)
    to_env = ActionScaler(env.single_action_space, device)
    # replay: a row of all agents' observations and the global state, one reward per agent
    one_step = partial(torch.zeros, args.num_envs, device=device)  # examples: shapes, dtypes
    rb = ReplayBuffer(
        args.buffer_size, one_step(A * obs_dim + state_dim), one_step(A, act_dim), one_step(A)
    )
    c_loss_fn, a_loss_fn = run.compile(critic_loss), run.compile(actor_loss)  # (--compile)
    params_t = list(actors_t.parameters()) + list(critics_t.parameters())
    params = list(actors.parameters()) + list(critics.parameters())

    N = args.num_envs
    noise = ColoredNoise(args.noise_color, (N, A, act_dim), device=device)
    num_iterations = args.total_steps // N
    # where the next step starts (observations, global state): fixed buffers
    obs, info = env.reset(seed=args.seed)
    obs, state = obs.clone(), info["state"].clone()
    # the state a checkpoint holds and a resumed run restores, named once
    saved = dict(actor=actors, critic=critics, actor_target=actors_t, critic_target=critics_t)
    saved |= dict(actor_opt=actor_opt, critic_opt=critic_opt, buffer=rb, env=env, noise=noise)
    saved |= dict(next_obs=obs, next_state=state)
    space = repr(env.single_action_space)
    meta = dict(n_agents=A, obs_dim=obs_dim, state_dim=state_dim, action_space=space)
    policy = partial(policy_from, actors, to_env)
    evaluate = partial(ma_evaluate, continuous_actions=True)
    run.start(env, saved, policy, meta, evaluate=evaluate)
    guard = run.guard
    meter = run.meter("critic_loss", "actor_loss")
    for _ in run.iterations(num_iterations, N, learning_starts=args.learning_starts):
        # ---- explore: mu_i(o_i) + Gaussian (or colored) noise; uniform before learning_starts ---
        with torch.no_grad():
            if run.step < args.learning_starts:
                actions = torch.rand(N, A, act_dim, device=device) * 2 - 1
            else:
                actions = actors(obs)
                actions = (actions + args.exploration_noise * noise.sample()).clamp(-1, 1)
        next_obs, reward, terminated, truncated, info = env.step(to_env(actions))
        final = torch.cat([info["final_obs"].flatten(1), info["final_state"]], 1)
        rb.add(torch.cat([obs.flatten(1), state], 1), actions, reward, final, terminated)
        obs.copy_(next_obs), state.copy_(info["state"])
        step = run.step + N  # env steps so far, this one's included
        guard.check(step)

        # ---- learn ----------------------------------------------------------------------------
        if step >= args.learning_starts:
            for _ in range(args.gradient_steps):
                b = rb.sample(args.batch_size)
                c_loss = c_loss_fn(actors_t, critics, critics_t, args, b, A, state_dim)
                meter.add(critic_loss=c_loss)
                guard.watch("critic loss", c_loss)
                critic_opt.zero_grad()
                c_loss.backward()
                critic_opt.step()
                run.updates += 1
                if run.updates % args.policy_delay == 0:  # delayed actor and target updates
                    a_loss = a_loss_fn(actors, critics, b, A, state_dim, args.others_from_policy)
                    meter.add(actor_loss=a_loss)
                    guard.watch("actor loss", a_loss)
                    actor_opt.zero_grad()
                    a_loss.backward()
                    actor_opt.step()
                    with torch.no_grad():
                        for p_t, p in zip(params_t, params):  # Polyak averaging of the target
                            p_t.lerp_(p, args.tau)
                guard.watch_params("parameters", [actors, critics])
                guard.check(step)
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """A deterministic `policy(obs, info=None) -> actions` from a checkpoint of this file: obs
    `[N, A, obs_dim]` (or one world's `[A, obs_dim]`, torch or numpy) -> actions in the env's Box,
    each agent acting on its own observation only; plugs into `common.ma_vec_env.ma_evaluate`."""
    ckpt = load_checkpoint(path, algo=ALGO, map_location=device)
    args = Args(**{k: tuple(v) if k == "hidden" else v for k, v in ckpt["args"].items()})
    env = envs.make(args.env, num_envs=1, continuous_actions=True)
    A, obs_dim = env.n_agents, env.single_observation_space.shape[0]
    actors = Actors(A, obs_dim, env.single_action_space.shape[0], args.hidden).to(device)
    actors.load_state_dict(ckpt["actor"])
    actors.eval()
    core = policy_from(actors, ActionScaler(env.single_action_space, device))
    fn = PolicyFn(core, device, env_id=args.env, obs_shape=(A, obs_dim))
    env.close()

    def policy(obs, info=None):
        return fn(obs)

    return policy


if __name__ == "__main__":
    main(cli(Args, __doc__))
