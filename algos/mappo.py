"""MAPPO: PPO-Clip with decentralized actors and a centralized critic, on massively parallel
multi-agent environments.

Multi-Agent PPO (Yu et al., 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent
Games", arXiv:2103.01955): every agent acts on its own observation with a stochastic actor; one
critic sees the global state (centralized training, decentralized execution). The update is
PPO-Clip (Schulman et al., 2017, arXiv:1707.06347) with GAE (Schulman et al., 2016,
arXiv:1506.02438), applied to every agent's ratio separately. N parallel worlds x A agents step in
one batched call; storage, GAE and the updates stay on the training device.

* actors: `--share-actor` (the paper's choice for homogeneous agents): one network, whose input is
  the agent's observation with a one-hot agent id appended; `--no-share-actor`: one network per
  agent, all A in one batched call (`common.ensemble.EnsembleMLP`). Unavailable actions
  (`info["avail_actions"]`) are masked out of the logits.
* critic: V(global state) with one value head per agent, `[N, state_dim] -> [N, A]`: every agent
  of a world sees the same state, so the trunk runs once per world (not A times, as a shared
  value with the agent id appended would), and each head fits its own agent's return (rewards
  are per agent: spread's collision penalties differ between agents).
* value normalization (the paper's ValueNorm): the critic predicts returns standardized by running
  statistics of the GAE returns, updated once per rollout before the epochs; GAE itself runs on
  de-normalized values (spread's returns are large and negative, their scale drifts).
* a truncated step's reward gets `gamma * V(final_state)`; advantages are normalized per minibatch
  (over worlds x agents); the entropy bonus is the paper's 0.01 on MPE.
* steps count worlds: `--total-steps` and the batch are in world steps (each is A agent steps).

    python algos/mappo.py --env simple_spread --num-envs 128
    python algos/mappo.py --no-share-actor --total-steps 2000000
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

import envs
from common.checkpoint import load_checkpoint
from common.cli import Clip, Count, Count0, Layers, NonNeg, Rate, RunArgs, Unit, cli
from common.distributions import Categorical
from common.ensemble import EnsembleLinear, EnsembleMLP
from common.errors import UserError
from common.evaluate import ma_evaluate
from common.ma_vec_env import MAEpisodeStatistics
from common.run import Run
from common.wrappers import RunningMeanStd

ALGO = "mappo"
PARENT, FAMILY = "ppo_vec", "multi-agent"  # its lineage (CONTRIBUTING.md)


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    env: str = "simple_spread"  # a multi-agent env id (torch-native, discrete actions)
    num_envs: int = 128  # parallel worlds (each holds all agents)
    total_steps: Count = 2_000_000  # world steps, summed over worlds
    eval_every: Count0 = 200_000  # evaluate the policy every this many env steps (0: at the end)
    eval_episodes: Count = 32  # episodes per evaluation (run in parallel on a separate env)
    save_every: Count0 = 500_000  # write the checkpoint every this many env steps (0: at the end)
    compile: bool = False  # torch.compile the policy step and the PPO loss

    # MAPPO
    num_steps: Count = 25  # rollout horizon per world per iteration
    learning_rate: Rate = 1e-3  # Adam learning rate (actor and critic)
    anneal_lr: bool = True  # anneal the learning rate linearly to 0
    gamma: Unit = 0.99  # discount factor
    gae_lambda: Unit = 0.95  # GAE lambda
    num_minibatches: Count = 4  # minibatches per epoch (of whole world steps, all agents of each)
    update_epochs: Count = 10  # epochs over each rollout
    norm_adv: bool = True  # normalize advantages per minibatch
    clip_coef: Rate = 0.2  # policy ratio clip
    clip_vloss: bool = False  # clip the (normalized) value loss around the old values
    ent_coef: NonNeg = 0.01  # entropy bonus coefficient
    vf_coef: NonNeg = 0.5  # value loss coefficient
    max_grad_norm: Clip = 10.0  # global gradient-norm clip
    target_kl: float | None = None  # stop the epochs early above this approximate KL
    hidden: Layers = (64, 64)  # hidden layer sizes of actor and critic
    # one actor for all agents (a one-hot agent id appended to its input); off: one per agent
    share_actor: bool = True
    value_norm: bool = True  # the critic predicts returns standardized by running statistics


def check_args(args: Args, env) -> None:  # (each field's own range: common.cli.check_ranges)
    if args.num_envs * args.num_steps % args.num_minibatches:
        raise UserError(
            f"num_envs x num_steps is not divisible by --num-minibatches {args.num_minibatches}"
        )
    if not hasattr(env, "n_agents") or not hasattr(env, "state_dim"):
        raise UserError(f"{ALGO} needs a multi-agent env; {args.env} is single-agent (ppo_vec.py)")
    if not isinstance(space := env.single_action_space, gym.spaces.Discrete):
        raise UserError(f"{ALGO} needs a Discrete action space per agent, not {space}")
    if len(shape := env.single_observation_space.shape) != 1:
        raise UserError(f"{ALGO}'s MLPs need flat observations, {args.env} has shape {shape}")


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


def ensemble_mlp(k: int, sizes, out_std: float) -> EnsembleMLP:
    """K tanh MLPs in one batched module, each member's layers initialized as `mlp` does."""
    net = EnsembleMLP(k, sizes[0], tuple(sizes[1:-1]), sizes[-1], activation=nn.Tanh)
    linears = [m for m in net.net if isinstance(m, EnsembleLinear)]
    with torch.no_grad():
        for j, lin in enumerate(linears):
            std = out_std if j == len(linears) - 1 else np.sqrt(2)
            for i in range(k):
                # [in, out] stored; init as a Linear's [out, in]
                nn.init.orthogonal_(lin.weight[i].T, std)
            lin.bias.zero_()
    return net


class Agent(nn.Module):
    """Decentralized actors pi(a_i | o_i) and a centralized critic V(s) -> one value per agent."""

    def __init__(self, obs_dim, state_dim, n_agents, n_actions, hidden=(64, 64), share_actor=True):
        super().__init__()
        self.n_agents, self.share_actor = n_agents, share_actor
        if share_actor:
            self.actor = mlp([obs_dim + n_agents, *hidden, n_actions], out_std=0.01)
        else:
            self.actor = ensemble_mlp(n_agents, [obs_dim, *hidden, n_actions], out_std=0.01)
        self.critic = mlp([state_dim, *hidden, n_agents], out_std=1.0)
        self.register_buffer("agent_ids", torch.eye(n_agents), persistent=False)

    def value(self, state: torch.Tensor) -> torch.Tensor:
        """[..., state_dim] -> [..., A] (normalized when value normalization is on)."""
        return self.critic(state)

    def logits(self, obs: torch.Tensor, avail: torch.Tensor | None = None) -> torch.Tensor:
        """[..., A, obs_dim] -> [..., A, n_actions], unavailable actions masked out."""
        if self.share_actor:
            ids = self.agent_ids.expand(*obs.shape[:-1], self.n_agents)
            out = self.actor(torch.cat((obs, ids), -1))
        else:  # members are agents: [A, B, obs_dim] through one batched matmul per layer
            lead = obs.shape[:-2]
            x = obs.reshape(-1, self.n_agents, obs.shape[-1]).transpose(0, 1)
            out = self.actor(x).transpose(0, 1).reshape(*lead, self.n_agents, -1)
        if avail is not None:
            out = out.masked_fill(~avail, -1e8)
        return out

    def act(self, obs: torch.Tensor, avail: torch.Tensor | None):
        """Sample every agent's action; return (action [.., A], log_prob [.., A])."""
        # torch's Categorical(logits=...) arithmetic, without its checks
        d = Categorical(self.logits(obs, avail))
        action = d.sample()
        return action, d.log_prob(action)

    def evaluate_actions(self, obs, avail, action, state):
        d = Categorical(self.logits(obs, avail))
        return d.log_prob(action), d.entropy(), self.value(state)

    def deterministic(self, obs: torch.Tensor, avail: torch.Tensor | None = None) -> torch.Tensor:
        return self.logits(obs, avail).argmax(-1)


def ppo_loss(agent: Agent, args: Args, mb: dict):
    """Clipped surrogate (per agent) + value + entropy loss on one minibatch of world steps;
    `returns` / `values` are in the critic's (normalized) units. (loss, named statistics)."""
    obs, avail, actions = mb["obs"], mb["avail"], mb["actions"]
    logp, entropy, value = agent.evaluate_actions(obs, avail, actions, mb["state"])
    advantages, returns, old_values = mb["advantages"], mb["returns"], mb["values"]
    log_ratio = logp - mb["logp"]
    ratio = log_ratio.exp()
    if args.norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    clipped = ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = torch.max(-advantages * ratio, -advantages * clipped).mean()
    if args.clip_vloss:
        v_clipped = old_values + (value - old_values).clamp(-args.clip_coef, args.clip_coef)
        v_loss = 0.5 * torch.max((value - returns).square(), (v_clipped - returns).square()).mean()
    else:
        v_loss = 0.5 * (value - returns).square().mean()
    ent = entropy.mean()
    # (ent_coef 0: no entropy in the backward)
    loss = (pg_loss - args.ent_coef * ent if args.ent_coef else pg_loss) + args.vf_coef * v_loss
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clipfrac = ((ratio - 1).abs() > args.clip_coef).float().mean()
    stats = dict(
        pg_loss=pg_loss, v_loss=v_loss, entropy=ent, approx_kl=approx_kl, clipfrac=clipfrac
    )
    return loss, {k: v.detach() for k, v in stats.items()}


@torch.no_grad()
def compute_gae(rewards, values, dones, next_value, gamma: float, lam: float):
    """GAE over a [T, N, A] rollout; `dones` [T, N, 1] marks the steps at which an episode ended."""
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        next_v = next_value if t == rewards.shape[0] - 1 else values[t + 1]
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_v * not_done - values[t]
        last = delta + gamma * lam * not_done * last
        advantages[t] = last
    return advantages, advantages + values


class ValueNorm:
    """Standardizes value targets by running mean/std of the returns (identity when disabled)."""

    def __init__(self, enabled: bool, device):
        self.enabled = enabled
        self.rms = RunningMeanStd((), device)

    def update(self, returns: torch.Tensor) -> None:
        if self.enabled:
            self.rms.update(returns.reshape(-1))

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        return ((x - self.rms.mean) / torch.sqrt(self.rms.var + 1e-8)).to(x.dtype)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        return (x * torch.sqrt(self.rms.var + 1e-8) + self.rms.mean).to(x.dtype)


def make_env(args: Args, device, seed: int):
    env = envs.make(args.env, num_envs=args.num_envs, device=device, seed=seed)
    return MAEpisodeStatistics(env)


def policy_from(agent: Agent):
    """(obs [N, A, obs_dim], info) -> deterministic actions [N, A], as `ma_evaluate` calls it."""

    def policy(obs, info=None):
        avail = info.get("avail_actions") if isinstance(info, dict) else None
        return agent.deterministic(obs, avail)

    return policy


def main(args: Args) -> dict:
    run = Run(ALGO, args)  # device, --resume (with its settings), seeds
    args, device = run.args, run.device
    env = make_env(args, device, args.seed)
    check_args(args, env)
    obs_dim, n_actions = int(env.single_observation_space.shape[0]), int(env.single_action_space.n)
    state_dim, A = int(env.state_dim), int(env.n_agents)
    agent = Agent(obs_dim, state_dim, A, n_actions, args.hidden, args.share_actor).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    value_norm = ValueNorm(args.value_norm, device)

    batch_size = args.num_envs * args.num_steps  # world steps per rollout
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_steps // batch_size
    T, N = args.num_steps, args.num_envs
    obs_buf = torch.zeros((T, N, A, obs_dim), device=device)
    avail_buf = torch.ones((T, N, A, n_actions), device=device, dtype=torch.bool)
    state_buf = torch.zeros((T, N, state_dim), device=device)
    final_state_buf = torch.zeros((T, N, state_dim), device=device)
    actions_buf = torch.zeros((T, N, A), device=device, dtype=torch.long)
    logp_buf = torch.zeros((T, N, A), device=device)
    rewards_buf = torch.zeros((T, N, A), device=device)
    dones_buf = torch.zeros((T, N, 1), device=device)
    trunc_buf = torch.zeros((T, N, 1), device=device)
    values_buf = torch.zeros((T, N, A), device=device)  # de-normalized

    act_fn, loss_fn = run.compile(agent.act), run.compile(ppo_loss)  # --compile, else as they are

    # where the next rollout starts (observations, state, available actions): fixed buffers
    obs, info = env.reset(seed=args.seed)
    next_obs, next_state = obs.clone(), info["state"].clone()
    next_avail = info["avail_actions"].clone() if "avail_actions" in info else None
    # the state a checkpoint holds and a resumed run restores, named once
    saved = dict(model=agent, optimizer=optimizer, env=env, value_norm=value_norm.rms)
    saved |= dict(next_obs=next_obs, next_state=next_state, next_avail=next_avail)
    meta = dict(obs_dim=obs_dim, state_dim=state_dim, n_agents=A, n_actions=n_actions)
    run.start(env, saved, partial(policy_from, agent), meta, evaluate=ma_evaluate)
    guard, group = run.guard, optimizer.param_groups[0]  # (resumed: the loaded group)
    meter = run.meter("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac")
    iterations = run.iterations(num_iterations, batch_size, metrics=lambda: dict(lr=group["lr"]))
    for iteration in iterations:
        if args.anneal_lr:
            group["lr"] = args.learning_rate * (1.0 - iteration / num_iterations)

        # ---- rollout ----------------------------------------------------------------------------
        with torch.no_grad():
            obs, state, avail = next_obs, next_state, next_avail
            for t in range(T):
                obs_buf[t], state_buf[t] = obs, state
                if avail is not None:
                    avail_buf[t] = avail
                action, logp = act_fn(obs, avail)
                values_buf[t] = value_norm.denormalize(agent.value(state))
                obs, reward, terminated, truncated, info = env.step(action)
                state, avail = info["state"], info.get("avail_actions")
                actions_buf[t], logp_buf[t] = action, logp
                rewards_buf[t] = reward
                dones_buf[t, :, 0] = (terminated | truncated).float()
                trunc_buf[t, :, 0] = (truncated & ~terminated).float()
                final_state_buf[t] = info["final_state"]
            next_obs.copy_(obs), next_state.copy_(state)
            if avail is not None:
                next_avail.copy_(avail)
            # bootstrap through time limits: r += gamma * V(final_state) where truncated
            final_values = value_norm.denormalize(agent.value(final_state_buf))
            rewards_buf.add_(args.gamma * final_values * trunc_buf)
            next_value = value_norm.denormalize(agent.value(next_state))
            r, v, d = rewards_buf, values_buf, dones_buf
            advantages, returns = compute_gae(r, v, d, next_value, args.gamma, args.gae_lambda)
            value_norm.update(returns)
            returns_n, values_n = value_norm.normalize(returns), value_norm.normalize(values_buf)

        # ---- update -----------------------------------------------------------------------------
        b = dict(obs=obs_buf, avail=avail_buf, state=state_buf, actions=actions_buf, logp=logp_buf)
        b |= dict(advantages=advantages, returns=returns_n, values=values_n)
        b = {k: v.flatten(0, 1) for k, v in b.items()}  # [T * N, ...]: world steps
        for epoch in range(args.update_epochs):
            perm = torch.randperm(batch_size, device=device)
            for start in range(0, batch_size, minibatch_size):
                idx = perm[start : start + minibatch_size]
                loss, stats = loss_fn(agent, args, {k: v[idx] for k, v in b.items()})
                meter.add(**stats)
                guard.watch("PPO loss", loss)
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
                guard.watch_params("parameters", agent)
            # (a host sync, opt-in)
            if args.target_kl is not None and stats["approx_kl"] > args.target_kl:
                break
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """A deterministic `policy(obs [N, A, obs_dim], info=None) -> actions [N, A]` from a checkpoint
    of this file (the form `common.ma_vec_env.ma_evaluate` calls); `info["avail_actions"]` masks
    when given."""
    ckpt = load_checkpoint(path, algo=ALGO, map_location=device)
    args = Args(**{k: tuple(v) if k == "hidden" else v for k, v in ckpt["args"].items()})
    dims = [ckpt[k] for k in ("obs_dim", "state_dim", "n_agents", "n_actions")]
    agent = Agent(*dims, args.hidden, args.share_actor).to(device)
    agent.load_state_dict(ckpt["model"])
    agent.eval()
    core = policy_from(agent)

    @torch.no_grad()
    def policy(obs, info=None):
        return core(torch.as_tensor(obs, dtype=torch.float32, device=device), info)

    return policy


if __name__ == "__main__":
    main(cli(Args, __doc__))
