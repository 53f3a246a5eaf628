"""D3QN (dueling double DQN) on vectorized environments.

`algos/double_dqn.py` with the dueling architecture (Wang et al., 2016, arXiv:1511.06581): the
Q-network splits after a shared trunk into a state value V(s) and action advantages A(s, a),
recombined as

    Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a'),

so the value of a state is learned from every action taken in it. The double-Q target, replay,
epsilon schedule, target network and `--per` are Double DQN's.

    python algos/d3qn.py --env CartPole-v1
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import torch
import torch.nn as nn

from common.buffers import PrioritizedReplayBuffer, ReplayBuffer
from common.cli import Clip, Count, Count0, Frac, Layers, Rate, RunArgs, Unit, cli, task_defaults
from common import encoders
from common.errors import UserError
from common.policy import Policy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent
from common.wrappers import wrap_env

ALGO = "d3qn"
PARENT, FAMILY = "double_dqn", "DQN"  # its lineage (CONTRIBUTING.md)


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    env: str = "CartPole-v1"  # an env id with a Discrete action space
    num_envs: int = 10  # number of parallel sub-environments
    total_steps: Count = 100_000  # total environment steps (summed over sub-envs)
    eval_every: Count0 = 10_000  # evaluate the policy every this many env steps (0: at the end)
    save_every: Count0 = 50_000  # write the checkpoint every this many env steps (0: at the end)
    compile: bool = False  # torch.compile the TD loss, the optimizer step and the greedy policy

    # DQN
    buffer_size: Count = 10_000  # replay buffer capacity (transitions)
    learning_rate: Rate = 1e-3  # Adam learning rate
    anneal_lr: bool = False  # anneal the learning rate linearly to 0 over the run
    batch_size: Count = 128  # minibatch size of each TD update
    gamma: Unit = 0.99  # discount factor
    tau: Frac = 1.0  # target network Polyak rate (1.0: hard copy)
    target_every: Count = 50  # update the target network every this many gradient steps
    start_e: Unit = 1.0  # initial exploration epsilon
    end_e: Unit = 0.05  # final exploration epsilon
    exploration_fraction: Unit = 0.1  # fraction of total_steps over which epsilon decays linearly
    learning_starts: Count0 = 1_000  # environment steps of random play before learning
    # gradient updates after each vectorized step (bench/NOTES.md, "dqn")
    gradient_steps: Count = 8
    # opt-in advantage learning: the TD target less alpha * (max_b Q_target(s, b) - Q_target(s, a)),
    # which widens the gap between the greedy action and the others (bench/NOTES.md, "advantage
    # learning"); 0: the paper's Q-learning
    action_gap: float = 0.0
    max_grad_norm: Clip = 10.0  # global gradient-norm clip
    hidden: Layers = (128, 128)  # hidden layer sizes of the Q-network
    norm_obs: bool = False  # normalize observations with running statistics
    per: bool = False  # proportional prioritized experience replay
    per_alpha: Unit = 0.6  # PER priority exponent
    per_beta: Unit = 0.4  # PER initial importance-sampling exponent (annealed to 1)


# Per-task defaults over the ones above (`--env X --help` lists them)
# fmt: off
TASK_DEFAULTS = {
    # pixels: the MinAtar paper's DQN (Young & Tian, 2019): one update per env step, batch 32,
    # 100k replay, target every 1,000 updates, epsilon to 0.1 over the first 100k steps
    **{f"MinAtar/{game}-v1": dict(num_envs=8, gradient_steps=8, batch_size=32,
                                  learning_rate=2.5e-4, buffer_size=100_000, target_every=1_000,
                                  end_e=0.1, exploration_fraction=0.02, learning_starts=5_000,
                                  hidden=(128,), total_steps=5_000_000, eval_every=250_000,
                                  save_every=1_000_000)
       for game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")},
}
# fmt: on
default_args = task_defaults(Args, TASK_DEFAULTS)


def check_args(args: Args, env) -> None:  # (each field's own range: common.cli.check_ranges)
    check_single_agent(env, args.env, ALGO, masks=True, flat=True, images=True)
    if not isinstance(env.single_action_space, gym.spaces.Discrete):
        raise UserError(f"{ALGO} needs a Discrete action space (Box: ppo_vec.py, sac.py, td3.py)")
    if args.buffer_size < args.num_envs:
        raise UserError(f"--buffer-size must hold one vectorized step ({args.num_envs})")
    if not 0.0 <= args.action_gap < 1.0:
        raise UserError(f"--action-gap must be in [0, 1) (0: the paper's), got {args.action_gap}")


MASKED_Q = -1e9  # a forbidden action's Q-value: never the greedy action nor the target's max


class QNetwork(nn.Module):
    """Dueling Q-network: shared trunk, then V(s) and A(s, .) heads."""

    def __init__(self, obs_dim, n_actions: int, hidden=(128, 128)):
        super().__init__()
        layers, width = encoders.layers(obs_dim)  # an image space (obs_dim): a conv encoder first
        sizes = [width, *hidden]
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.trunk = nn.Sequential(*layers)
        self.value = nn.Linear(sizes[-1], 1)
        self.advantage = nn.Linear(sizes[-1], n_actions)

    def forward(self, obs: dict) -> torch.Tensor:
        """Q-values from the `policy` group; an action the env's mask (if any) forbids gets
        MASKED_Q."""
        h = self.trunk(obs["policy"])
        adv = self.advantage(h)
        q = self.value(h) + adv - adv.mean(-1, keepdim=True)
        return q.masked_fill(~obs["action_mask"], MASKED_Q) if "action_mask" in obs else q


def td_loss(q_net: QNetwork, target_net: QNetwork, gamma: float, alpha: float, b):
    """Importance-weighted squared error between Q(s, a) and the double-Q target
    r + gamma * (1 - terminated) * Q_target(s', argmax_a' Q(s', a')),
    less alpha * the action gap."""
    a = b["actions"].long().unsqueeze(-1)
    with torch.no_grad():
        next_a = q_net(b["next_obs"]).argmax(-1, keepdim=True)
        q_target = target_net(Batch.cat([b["next_obs"], b["obs"]]) if alpha > 0 else b["next_obs"])
        next_q = q_target[: len(b["rewards"])].gather(-1, next_a).squeeze(-1)
        target = b["rewards"] + gamma * (1.0 - b["terminated"]) * next_q
        if alpha > 0:  # the target network's gap between the greedy action and the one taken, at s
            here = q_target[len(b["rewards"]) :]
            target = target - alpha * (here.max(-1).values - here.gather(-1, a).squeeze(-1))
    q = q_net(b["obs"]).gather(-1, a).squeeze(-1)
    td = q - target
    return (b["weights"] * td.square()).mean(), q.detach().mean(), td.detach().abs()


def epsilon_at(args: Args, step: int) -> float:
    span = max(args.exploration_fraction * args.total_steps, 1.0)
    return max(args.end_e, args.start_e + (args.end_e - args.start_e) * step / span)


def make_env(args: Args, device, seed: int):
    import envs  # here, not at the top: a checkpoint's policy loads without the env package

    env = envs.make(args.env, args.num_envs, device, seed)
    return wrap_env(env, norm_obs=args.norm_obs, gamma=args.gamma, groups=True)


def main(args: Args) -> dict:
    run = Run(ALGO, args, defaults=default_args)  # device, --resume (with its settings), seeds
    args, device = run.args, run.device
    env = make_env(args, device, args.seed)
    check_args(args, env)
    n_actions = int(env.single_action_space.n)
    obs_dim = encoders.obs_input(env.single_observation_space["policy"])  # width or image space
    net = dict(obs_dim=obs_dim, n_actions=n_actions, hidden=args.hidden)
    q_net, target_net = QNetwork(**net).to(device), QNetwork(**net).to(device)
    target_net.load_state_dict(q_net.state_dict())
    # the learning rate is a tensor that annealing fills in place, so that a compiled optimizer
    # step covers it (float64: a Python float's arithmetic); capturable: Adam's step stays on CUDA
    lr = torch.tensor(args.learning_rate, dtype=torch.float64, device=device)
    adam = dict(capturable=True) if device.type == "cuda" else dict(fused=device.type == "cpu")
    optimizer = torch.optim.Adam(q_net.parameters(), lr=lr, **adam)
    obs = Batch(env.reset(seed=args.seed)[0]).clone()  # where the next step starts: a fixed buffer
    # storage for each observation group, the actions, rewards and flags
    rb_args = (args.buffer_size, obs, torch.zeros(args.num_envs, dtype=torch.long, device=device))
    if args.per:
        rb = PrioritizedReplayBuffer(*rb_args, alpha=args.per_alpha)
    else:
        rb = ReplayBuffer(*rb_args)

    def opt_step():  # gradient clipping and the Adam step
        nn.utils.clip_grad_norm_(q_net.parameters(), args.max_grad_norm)
        optimizer.step()

    loss_fn, q_fn = run.compile(td_loss), run.compile(q_net)  # --compile, else as they are
    step_fn = run.compile(opt_step, graphs=False)

    N = args.num_envs
    num_iterations = args.total_steps // N
    # the deployable policy: normalizer, greedy action of the Q-network (common/policy.py)
    policy = Policy.of(q_net, net, env, act="greedy")
    # the state a checkpoint holds and a resumed run restores, named once
    state = dict(
        model=q_net, target=target_net, optimizer=optimizer, buffer=rb, env=env, next_obs=obs
    )
    run.start(env, state, policy)
    guard, group = run.guard, optimizer.param_groups[0]  # (resumed: the loaded group)
    meter = run.meter("td_loss", "q_mean")
    for iteration in run.iterations(
        num_iterations, N, lambda: dict(epsilon=epsilon_at(args, run.step)), args.learning_starts
    ):
        if args.anneal_lr:
            group["lr"].fill_(args.learning_rate * (1.0 - iteration / num_iterations))
        # ---- explore: epsilon-greedy over all sub-envs at once -----------------------------------
        eps = epsilon_at(args, run.step)
        with torch.no_grad():
            greedy = q_fn(obs).argmax(-1)
            if "action_mask" in obs:  # uniform over the allowed actions
                random_actions = (
                    torch.rand(N, n_actions, device=device) + obs["action_mask"]
                ).argmax(-1)
            else:
                random_actions = torch.randint(0, n_actions, (N,), device=device)
            explore = torch.rand(N, device=device) < eps
            actions = torch.where(explore, random_actions, greedy)
        next_obs, reward, terminated, truncated, info = env.step(actions)
        rb.add(obs, actions, reward, info["final_obs"], terminated)
        obs.copy_(next_obs)
        step = run.step + N  # env steps so far, this one's included
        guard.check(step)

        # ---- learn -------------------------------------------------------------------------------
        if step > args.learning_starts:
            beta = args.per_beta + (1.0 - args.per_beta) * min(1.0, step / args.total_steps)
            for _ in range(args.gradient_steps):
                b = rb.sample(args.batch_size, beta=beta)
                loss, q_mean, td_abs = loss_fn(q_net, target_net, args.gamma, args.action_gap, b)
                meter.add(td_loss=loss, q_mean=q_mean)
                guard.watch("TD loss", loss)
                optimizer.zero_grad()
                loss.backward()
                step_fn()
                rb.update_priorities(b["indices"], td_abs)
                run.updates += 1
                if run.updates % args.target_every == 0:
                    with torch.no_grad():
                        # Polyak averaging of the target (tau 1: a copy)
                        for p_t, p in zip(target_net.parameters(), q_net.parameters()):
                            p_t.lerp_(p, args.tau)
                guard.watch_params("parameters", q_net)
                guard.check(step)
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: normalization, the
    greedy action), rebuilt without an env."""
    return Policy.restore(path, ALGO, QNetwork, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
