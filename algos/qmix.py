"""QMIX: monotonic value function factorisation for cooperative multi-agent Q-learning.

QMIX (Rashid et al., 2018, arXiv:1803.11485) generalizes VDN's sum (algos/vdn.py) to a mixing
network that combines the per-agent utilities Q_a(o_a, u_a) into Q_tot(s, u) conditioned on the
global state s, under the constraint dQ_tot/dQ_a >= 0 for every agent: then each agent acting
greedily on its own Q_a still maximizes Q_tot. Only Q_tot is trained, by one-step TD regression on
the team reward r (the mean of the agents' rewards):

    L = ( r + gamma * (1 - terminated) * Q_tot_target(s', u'*) - Q_tot(s, u) )^2

The mixer: hidden = ELU(q W1 + b1), Q_tot = hidden W2 + b2 with q = [Q_1, ..., Q_A]; its weights
W1 [A, embed] and W2 [embed, 1] are the absolute values of linear hypernetworks of s (non-negative
weights and a monotonic activation => monotonic in each Q_a), b1 is a linear function of s and the
final bias b2 a 2-layer (ReLU) hypernetwork of s; biases may be negative.

This file is algos/vdn.py with its `Mixer` replaced (and the mixer's sizes as flags): one agent
MLP shared by all agents (not the paper's GRU: an MPE observation is nearly a Markov state),
double Q-learning, epsilon-greedy among the available actions, standardised rewards, truncated
transitions bootstrapped from the final observation and state (algos/vdn.py says why).

    python algos/qmix.py --env simple_spread --total-steps 300000
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
import torch.nn as nn

import envs
from common.buffers import ReplayBuffer
from common.checkpoint import load_checkpoint
from common.cli import Clip, Count, Count0, Frac, Layers, Rate, RunArgs, Unit, cli
from common.errors import UserError
from common.evaluate import ma_evaluate
from common.ma_vec_env import MAEpisodeStatistics
from common.run import Run
from common.wrappers import RunningMeanStd

ALGO = "qmix"
PARENT, FAMILY = "vdn", "multi-agent"  # its lineage (CONTRIBUTING.md)


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    env: str = "simple_spread"  # a multi-agent env id with Discrete per-agent actions
    num_envs: int = 16  # parallel worlds
    total_steps: Count = 300_000  # world steps, summed over worlds (every agent acts in each)
    eval_every: Count0 = 50_000  # evaluate the policy every this many env steps (0: at the end)
    eval_episodes: Count = 20  # episodes per evaluation (run in parallel on a separate env)
    save_every: Count0 = 100_000  # write the checkpoint every this many env steps (0: at the end)
    compile: bool = False  # torch.compile the TD update

    # QMIX
    buffer_size: Count = 100_000  # replay buffer capacity (world transitions)
    learning_rate: Rate = 5e-4  # Adam learning rate
    batch_size: Count = 256  # minibatch size of each TD update (world transitions)
    gamma: Unit = 0.99  # discount factor
    tau: Frac = 1.0  # target network Polyak rate (1.0: hard copy)
    target_every: Count = 200  # update the target network every this many gradient steps
    # pick the bootstrap action with the online network, evaluate it with the target (double Q)
    double_q: bool = True
    start_e: Unit = 1.0  # initial exploration epsilon
    end_e: Unit = 0.05  # final exploration epsilon
    exploration_fraction: Unit = 0.3  # fraction of total_steps over which epsilon decays linearly
    learning_starts: Count0 = 5_000  # environment steps of random play before learning
    gradient_steps: Count = 1  # gradient updates after each vectorized step
    max_grad_norm: Clip = 10.0  # global gradient-norm clip
    hidden: Layers = (128, 128)  # hidden layer sizes of the shared agent network
    # train on (r - mean) / std of the team rewards seen so far (running statistics)
    standardise_rewards: bool = True
    mixing_embed_dim: int = 32  # width of the mixing network's hidden layer
    hypernet_hidden: int = 32  # hidden width of the hypernetwork of the mixer's final bias


def check_args(args: Args, env) -> None:  # (each field's own range: common.cli.check_ranges)
    if not hasattr(env, "n_agents") or not getattr(env, "discrete", False):
        raise UserError(f"{args.env}: {ALGO} needs a multi-agent env with a Discrete action space")
    if len(shape := env.single_observation_space.shape) != 1:
        raise UserError(f"{ALGO}'s MLP needs flat observations, {args.env} has shape {shape}")
    if args.buffer_size < args.num_envs:
        raise UserError(f"--buffer-size must hold one vectorized step ({args.num_envs})")


class AgentQNetwork(nn.Module):
    """Q_a(o_a, .) of every agent at once: one shared MLP, its input obs + a one-hot agent id."""

    def __init__(self, obs_dim: int, n_agents: int, n_actions: int, hidden=(128, 128)):
        super().__init__()
        sizes, layers = [obs_dim + n_agents, *hidden], []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], n_actions))
        self.net = nn.Sequential(*layers)
        self.register_buffer("agent_ids", torch.eye(n_agents), persistent=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [..., A, obs_dim] -> Q [..., A, n_actions]."""
        ids = self.agent_ids.expand(*obs.shape[:-1], self.agent_ids.shape[0])
        return self.net(torch.cat([obs, ids.to(obs.dtype)], -1))


class Mixer(nn.Module):
    """QMIX's monotonic mixing network: Q_tot = ELU(q |W1(s)| + b1(s)) |W2(s)| + b2(s)."""

    def __init__(self, n_agents: int, state_dim: int, args: Args):
        super().__init__()
        self.n_agents, self.embed = n_agents, args.mixing_embed_dim
        self.hyper_w1 = nn.Linear(state_dim, n_agents * self.embed)
        self.hyper_b1 = nn.Linear(state_dim, self.embed)
        self.hyper_w2 = nn.Linear(state_dim, self.embed)
        h = args.hypernet_hidden
        self.hyper_b2 = nn.Sequential(nn.Linear(state_dim, h), nn.ReLU(), nn.Linear(h, 1))

    def forward(self, agent_qs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """agent_qs [B, A], state [B, state_dim] -> Q_tot [B]."""
        # >= 0: monotonic in each Q_a
        w1 = self.hyper_w1(state).abs().view(-1, self.n_agents, self.embed)
        hidden = torch.bmm(agent_qs.unsqueeze(1), w1).squeeze(1) + self.hyper_b1(state)
        hidden = nn.functional.elu(hidden)
        w2 = self.hyper_w2(state).abs()  # >= 0
        return (hidden * w2).sum(-1) + self.hyper_b2(state).squeeze(-1)


class QLearner(nn.Module):
    """The agent network and the mixer: everything the TD loss trains (and the target copies)."""

    def __init__(self, obs_dim: int, n_agents: int, n_actions: int, state_dim: int, args: Args):
        super().__init__()
        self.agent = AgentQNetwork(obs_dim, n_agents, n_actions, args.hidden)
        self.mixer = Mixer(n_agents, state_dim, args)


def masked(q: torch.Tensor, avail: torch.Tensor | None) -> torch.Tensor:
    """Unavailable actions get Q = -inf (so argmax/max never pick them)."""
    return q if avail is None else q.masked_fill(~avail, float("-inf"))


def chosen_q_tot(model: QLearner, obs, actions, state):
    """Q_tot(s, u) = mixer(Q_1(o_1, u_1), ..., Q_A(o_A, u_A); s) and the chosen agent Qs [B, A]."""
    agent_qs = model.agent(obs).gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    return model.mixer(agent_qs, state), agent_qs


def td_loss(model, target, gamma: float, double_q: bool, b):
    """Squared error of Q_tot(s, u) against r + gamma * (1 - terminated) * Q_tot_target(s', u'*)."""
    with torch.no_grad():
        next_q_target = target.agent(b["next_obs"])
        picker = model.agent(b["next_obs"]) if double_q else next_q_target
        best = masked(picker, b["next_avail"]).argmax(-1, keepdim=True)
        next_tot = target.mixer(next_q_target.gather(-1, best).squeeze(-1), b["next_state"])
        y = b["rewards"] + gamma * (1.0 - b["terminated"]) * next_tot
    q_tot, agent_qs = chosen_q_tot(model, b["obs"], b["actions"], b["state"])
    td = q_tot - y
    return td.square().mean(), q_tot.detach().mean(), agent_qs.detach().mean()


def epsilon_at(args: Args, step: int) -> float:
    span = max(args.exploration_fraction * args.total_steps, 1.0)
    return max(args.end_e, args.start_e + (args.end_e - args.start_e) * step / span)


def make_env(args: Args, device, seed: int):
    env = envs.make(args.env, num_envs=args.num_envs, device=device, seed=seed)
    return MAEpisodeStatistics(env)


def policy_from(agent: AgentQNetwork):
    """(obs [N, A, obs_dim], info) -> greedy joint action [N, A] among the available actions."""

    def policy(obs, info=None):
        avail = info.get("avail_actions") if info is not None else None
        return masked(agent(obs), avail).argmax(-1)

    return policy


def main(args: Args) -> dict:
    run = Run(ALGO, args)  # device, --resume (with its settings), seeds
    args, device = run.args, run.device
    env = make_env(args, device, args.seed)
    check_args(args, env)
    A, n_actions, state_dim = env.n_agents, env.n_actions, env.state_dim
    obs_dim = int(np.prod(env.single_observation_space.shape))
    model = QLearner(obs_dim, A, n_actions, state_dim, args).to(device)
    target = QLearner(obs_dim, A, n_actions, state_dim, args).to(device)
    target.load_state_dict(model.state_dict())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    reward_rms = RunningMeanStd((), device)
    loss_fn = run.compile(td_loss)  # --compile, else as it is

    N = args.num_envs
    num_iterations = args.total_steps // N
    # where the next step starts (observations, state, available actions): fixed buffers
    obs, info = env.reset(seed=args.seed)
    obs, state, avail = obs.clone(), info["state"].clone(), info["avail_actions"].clone()
    # replay rows as one vectorized step: observations, joint actions, the team reward; and what the
    # multi-agent target needs: the global state before and after, the actions available after
    actions = torch.zeros(N, A, dtype=torch.long, device=device)
    rb = ReplayBuffer(
        args.buffer_size, obs, actions, state=state, next_state=state, next_avail=avail
    )
    # the state a checkpoint holds and a resumed run restores, named once
    saved = dict(model=model, target=target, optimizer=optimizer, buffer=rb, reward_rms=reward_rms)
    saved |= dict(env=env, next_obs=obs, next_state=state, next_avail=avail)
    obs_shape, space = tuple(env.single_observation_space.shape), repr(env.single_action_space)
    meta = dict(obs_shape=obs_shape, action_space=space, n_agents=A, state_dim=state_dim)
    policy = partial(policy_from, model.agent)
    run.start(env, saved, policy, meta, evaluate=ma_evaluate)
    guard = run.guard
    meter = run.meter("td_loss", "q_tot_mean", "agent_q_mean")
    for _ in run.iterations(
        num_iterations, N, lambda: dict(epsilon=epsilon_at(args, run.step)), args.learning_starts
    ):
        # ---- explore: epsilon-greedy per agent, over all worlds at once -------------------------
        eps = epsilon_at(args, run.step)
        with torch.no_grad():
            greedy = masked(model.agent(obs), avail).argmax(-1)
            # uniform among the available actions: the largest of i.i.d. uniform scores
            scores = torch.rand(N, A, n_actions, device=device)
            random_actions = scores.masked_fill(~avail, -1.0).argmax(-1)
            explore = torch.rand(N, A, device=device) < eps
            actions = torch.where(explore, random_actions, greedy)
        next_obs, rewards, terminated, truncated, info = env.step(actions)
        next_avail = info["avail_actions"]
        # the bootstrap of a finished world uses its true last obs/state; the env reports no
        # availability for that final obs (unless it offers "final_avail_actions"): all allowed
        done = info["_final_obs"][:, None, None]
        final_avail = info.get("final_avail_actions", torch.ones_like(next_avail))
        final_avail = torch.where(done, final_avail, next_avail)
        final_obs, final_state = info["final_obs"], info["final_state"]
        team_reward = rewards.mean(-1)
        reward_rms.update(team_reward)
        extra = dict(state=state, next_state=final_state, next_avail=final_avail)
        rb.add(obs, actions, team_reward, final_obs, terminated, **extra)
        obs.copy_(next_obs), state.copy_(info["state"]), avail.copy_(next_avail)
        step = run.step + N  # env steps so far, this one's included
        guard.check(step)

        # ---- learn ----------------------------------------------------------------------------
        if step > args.learning_starts:
            for _ in range(args.gradient_steps):
                b = rb.sample(args.batch_size)
                if args.standardise_rewards:
                    r = (b["rewards"] - reward_rms.mean) / (reward_rms.var + 1e-8).sqrt()
                    b["rewards"] = r.float()
                loss, q_tot, agent_q = loss_fn(model, target, args.gamma, args.double_q, b)
                meter.add(td_loss=loss, q_tot_mean=q_tot, agent_q_mean=agent_q)
                guard.watch("TD loss", loss)
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                run.updates += 1
                if run.updates % args.target_every == 0:
                    with torch.no_grad():
                        # Polyak averaging of the target (tau 1: a copy)
                        for p_t, p in zip(target.parameters(), model.parameters()):
                            p_t.lerp_(p, args.tau)
                guard.watch_params("parameters", model)
                guard.check(step)
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """A greedy decentralized policy `policy(obs, info=None) -> actions` from a checkpoint of this
    file: obs [N, A, obs_dim] (or [A, obs_dim]), torch or numpy, answered in kind; unavailable
    actions are masked when `info["avail_actions"]` is given."""
    ckpt = load_checkpoint(path, algo=ALGO, map_location=device)
    args = Args(**{k: tuple(v) if k == "hidden" else v for k, v in ckpt["args"].items()})
    obs_dim, A = ckpt["obs_shape"][0], ckpt["n_agents"]
    n_actions = ckpt["model"]["agent.net.{}.bias".format(2 * len(args.hidden))].shape[0]
    model = QLearner(obs_dim, A, n_actions, ckpt["state_dim"], args).to(device)
    model.load_state_dict(ckpt["model"])
    model.eval()
    greedy = policy_from(model.agent)

    @torch.no_grad()
    def policy(obs, info=None):
        as_numpy = not isinstance(obs, torch.Tensor)
        obs = np.asarray(obs) if as_numpy else obs
        x = torch.as_tensor(obs, dtype=torch.float32, device=device)
        single = x.dim() == 2
        if info is not None and "avail_actions" in info:
            m = info["avail_actions"]
            m = torch.as_tensor(np.asarray(m) if as_numpy else m, device=device).bool()
            info = {"avail_actions": m.unsqueeze(0) if single else m}
        a = greedy(x.unsqueeze(0) if single else x, info)
        a = a.squeeze(0) if single else a
        return a.cpu().numpy() if as_numpy else a

    return policy


if __name__ == "__main__":
    main(cli(Args, __doc__))
