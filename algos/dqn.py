"""DQN with a target network on vectorized environments.

Deep Q-Network (Mnih et al., 2015, "Human-level control through deep reinforcement learning"):
a Q-network trained by regression on one-step TD targets `r + gamma * max_a' Q_target(s', a')`
from an experience-replay buffer, with epsilon-greedy exploration annealed linearly and a target
network that trails the online one (here a Polyak average with rate `tau`; `tau=1` with
`target_every=K` gives the paper's hard copy every K updates). `--action-gap` (on by default) is
advantage learning (Bellemare et al., 2016): the target is lowered by the target network's gap between the
greedy action and the one taken, so that greedy choices stay apart once the values converge. `--per` switches
to proportional prioritized replay (Schaul et al., 2016). Squared TD error with global
grad-norm clipping (on CartPole the Huber loss of the paper learned far slower here: its bounded
gradient needs many more updates to grow Q to the ~100 that gamma=0.99 implies).

Every sub-env steps at once; the replay buffer lives on the training device
(`common.buffers.ReplayBuffer`); `gradient_steps` updates follow each vectorized step.
Truncated transitions bootstrap from the true final observation, terminated ones do not.

    python algos/dqn.py --env CartPole-v1
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from common.buffers import PrioritizedReplayBuffer, ReplayBuffer
from common.cli import Clip, Count, Count0, Layers, Rate, RunArgs, Unit, cli
from common.device import compile_fn
from common.errors import UserError
from common.logger import Meter
from common.policy import Policy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent, group_spaces
from common.wrappers import wrap_env

ALGO = "dqn"


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    env: str = "CartPole-v1"
    """environment id with a Discrete action space (torch-native or any gymnasium id)"""
    num_envs: int = 10
    total_steps: Count = 100_000
    eval_every: Count0 = 10_000
    save_every: Count0 = 50_000
    compile: bool = False
    """torch.compile the TD loss (forward and backward), the optimizer step
    (learning-rate annealing included) and the greedy policy step (on CUDA: CUDA graphs, the optimizer step's excepted)"""

    # DQN
    buffer_size: Count = 10_000
    """replay buffer capacity (transitions)"""
    learning_rate: Rate = 1e-3
    """Adam learning rate"""
    anneal_lr: bool = False
    """anneal the learning rate linearly to 0 over the run"""
    batch_size: Count = 128
    """minibatch size of each TD update"""
    gamma: Unit = 0.99
    """discount factor"""
    tau: Unit = 1.0
    """target network Polyak rate (1.0: hard copy)"""
    target_every: Count = 50
    """update the target network every this many gradient steps"""
    start_e: Unit = 1.0
    """initial exploration epsilon"""
    end_e: Unit = 0.05
    """final exploration epsilon"""
    exploration_fraction: Unit = 0.1
    """fraction of total_steps over which epsilon decays linearly"""
    learning_starts: Count0 = 1_000
    """environment steps of random play before learning"""
    gradient_steps: Count = 8
    """gradient updates after each vectorized step (replay ratio = gradient_steps * batch / num_envs); these
    defaults won a held-out sweep on CartPole-v1 (bench/README.md, "dqn")"""
    action_gap: float = 0.0
    """opt-in, not the paper's: advantage learning (Bellemare et al., 2016, "Increasing the Action Gap"), whose TD
    target subtracts alpha * (max_b Q_target(s, b) - Q_target(s, a)) to widen the gap between the greedy action
    and the others, so that a solved task stays solved more often (bench/README.md, "advantage learning");
    0 is the paper's Q-learning"""
    max_grad_norm: Clip = 10.0
    """global gradient-norm clip"""
    hidden: Layers = (64, 64)
    """hidden layer sizes of the Q-network (64x64 won a sweep against 128x128 on CartPole-v1, and costs less per
    update: bench/README.md#defaults-the-evidence)"""
    norm_obs: bool = False
    """normalize observations with running statistics (saved in the checkpoint)"""
    per: bool = False
    """proportional prioritized experience replay"""
    per_alpha: Unit = 0.6
    """PER priority exponent"""
    per_beta: Unit = 0.4
    """PER initial importance-sampling exponent (annealed to 1)"""


# Per-task defaults over the ones above: the settings a held-out sweep chose for a task (bench/sweep.py: tuned on
# seeds 101-103, reported on seeds 1-5; bench/results/sweeps/). `--env X --help` lists the task's defaults.
TASK_DEFAULTS: dict[str, dict] = {
    # half the updates, twice the batch: solved sooner by training time (bench/README.md, "dqn")
    "CartPole-v1": dict(gradient_steps=4, batch_size=256),
}


def default_args(env_id: str, num_envs: int | None = None, device: str = "auto") -> Args:
    """The defaults for a task: `Args()` with the task's row of `TASK_DEFAULTS`, if it has one."""
    return replace(Args(env=env_id), **TASK_DEFAULTS.get(env_id, {}))


def check_args(args: Args, env) -> None:
    check_single_agent(env, args.env, ALGO, masks=True)
    if not isinstance(env.single_action_space, gym.spaces.Discrete):
        raise UserError(
            f"dqn needs a Discrete action space; {args.env} has {env.single_action_space}. "
            f"Use algos/ppo_vec.py (any action space) or, for continuous actions, sac.py or td3.py."
        )
    shape = group_spaces(env.single_observation_space)[0].shape  # the policy group's
    if len(shape) != 1:
        raise UserError(f"dqn's MLP needs flat observations, {args.env} has shape "
                         f"{shape}; flatten them in the env")
    if args.batch_size <= 0 or args.gradient_steps <= 0 or args.target_every <= 0:
        raise UserError("--batch-size, --gradient-steps and --target-every must be positive")
    if args.buffer_size < args.num_envs:
        raise UserError(f"--buffer-size {args.buffer_size} must hold at least one vectorized step ({args.num_envs})")
    if not 0.0 < args.tau <= 1.0:
        raise UserError(f"--tau must be in (0, 1], got {args.tau}")
    if not 0.0 <= args.action_gap < 1.0:
        raise UserError(f"--action-gap must be in [0, 1) (0: plain Q-learning), got {args.action_gap}")
    if args.learning_starts >= args.total_steps:
        raise UserError(f"--learning-starts {args.learning_starts} >= --total-steps {args.total_steps}: nothing would be learned")


MASKED_Q = -1e9  # the Q-value of a forbidden action (env's action mask): never the greedy action nor the target's max


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, hidden=(128, 128)):
        super().__init__()
        sizes, layers = [obs_dim, *hidden], []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], n_actions))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: dict) -> torch.Tensor:
        """Q-values from the `policy` group; an action the env's mask (if any) forbids gets MASKED_Q."""
        q = self.net(obs["policy"])
        return q.masked_fill(~obs["action_mask"], MASKED_Q) if "action_mask" in obs else q


def td_loss(q_net: QNetwork, target_net: QNetwork, gamma: float, alpha: float, b):
    """Importance-weighted squared error between Q(s, a) and r + gamma * (1 - terminated) * max_a' Q_target(s', a'),
    less alpha * (max_b Q_target(s, b) - Q_target(s, a)) when alpha > 0 (advantage learning)."""
    with torch.no_grad():
        q_target = target_net(Batch.cat([b.next_obs, b.obs]) if alpha > 0 else b.next_obs)
        next_q = q_target[:len(b.rewards)].max(-1).values
        target = b.rewards + gamma * (1.0 - b.terminated) * next_q
        if alpha > 0:  # the target network's gap between the greedy action and the one taken, at s
            here = q_target[len(b.rewards):]
            target = target - alpha * (here.max(-1).values - here.gather(-1, b.actions.long().unsqueeze(-1)).squeeze(-1))
    q = q_net(b.obs).gather(-1, b.actions.long().unsqueeze(-1)).squeeze(-1)
    td = q - target
    return (b.weights * td.square()).mean(), q.detach().mean(), td.detach().abs()


def epsilon_at(args: Args, step: int) -> float:
    span = max(args.exploration_fraction * args.total_steps, 1.0)
    return max(args.end_e, args.start_e + (args.end_e - args.start_e) * step / span)


def make_env(args: Args, device, seed: int):
    import envs  # here, not at the top: a checkpoint's policy loads without the env package
    env = envs.make(args.env, num_envs=args.num_envs, device=device, seed=seed)
    return wrap_env(env, norm_obs=args.norm_obs, gamma=args.gamma, groups=True)


def main(args: Args) -> dict:
    run = Run(ALGO, args, defaults=default_args)  # device, --resume (with its settings), seeds
    args, device = run.args, run.device
    env = make_env(args, device, args.seed)
    check_args(args, env)
    obs_space, n_actions = env.single_observation_space, int(env.single_action_space.n)
    obs_dim = int(np.prod(obs_space["policy"].shape))
    net = dict(obs_dim=obs_dim, n_actions=n_actions, hidden=args.hidden)
    q_net, target_net = QNetwork(**net).to(device), QNetwork(**net).to(device)
    target_net.load_state_dict(q_net.state_dict())
    # the learning rate is a tensor that annealing fills in place, so that a compiled optimizer step covers it (float64:
    # the same arithmetic as a Python float); capturable on CUDA: Adam's step counter stays on the device; fused on
    # the CPU: one kernel for the step, not a loop of small ops
    lr = torch.tensor(args.learning_rate, dtype=torch.float64, device=device)
    adam_kw = dict(capturable=True) if device.type == "cuda" else dict(fused=device.type == "cpu")
    optimizer = torch.optim.Adam(q_net.parameters(), lr=lr, **adam_kw)
    obs = Batch(env.reset(seed=args.seed)[0]).clone()  # where the next step starts (its groups): a fixed buffer
    if args.per:  # storage for each observation group, the actions, rewards and flags
        rb = PrioritizedReplayBuffer(args.buffer_size, obs, (), torch.long, device, alpha=args.per_alpha)
    else:
        rb = ReplayBuffer(args.buffer_size, obs, (), torch.long, device)

    def opt_step():  # gradient clipping and the Adam step
        nn.utils.clip_grad_norm_(q_net.parameters(), args.max_grad_norm)
        optimizer.step()

    loss_fn, q_fn, step_fn = td_loss, q_net, opt_step
    if args.compile:
        loss_fn, q_fn = compile_fn(td_loss, device), compile_fn(q_net, device)
        step_fn = compile_fn(opt_step, device, graphs=False)

    N = args.num_envs
    num_iterations = args.total_steps // N
    # the deployable policy: observation normalizer, greedy action of the Q-network (common/policy.py)
    policy = Policy.of(q_net, net, env, act="greedy")
    # the state a checkpoint holds and a resumed run restores, named once
    run.start(env, dict(model=q_net, target=target_net, optimizer=optimizer, buffer=rb, env=env, next_obs=obs), policy,
              extra=lambda: dict(updates=updates))
    guard = run.guard
    updates = run.ckpt["updates"] if run.ckpt else 0  # gradient steps so far: the target network's schedule
    meter = Meter(device, "td_loss", "q_mean")  # summed on the device, read at the logging tick
    # after each step the shell counts the env steps, checks for NaN, evaluates, logs and checkpoints on their ticks
    for iteration in run.iterations(num_iterations, N, metrics=lambda: dict(**meter.pop(), epsilon=eps),
                                    learning_starts=args.learning_starts):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"].fill_(args.learning_rate * (1.0 - iteration / num_iterations))
        # ---- explore: epsilon-greedy over all sub-envs at once -------------------------------------
        eps = epsilon_at(args, run.step)
        with torch.no_grad():
            greedy = q_fn(obs).argmax(-1)
            random_actions = torch.randint(0, n_actions, (N,), device=device) if "action_mask" not in obs else \
                (torch.rand(N, n_actions, device=device) + obs["action_mask"]).argmax(-1)  # uniform, allowed only
            explore = torch.rand(N, device=device) < eps
            actions = torch.where(explore, random_actions, greedy)
        next_obs, reward, terminated, truncated, info = env.step(actions)
        guard.watch("observations", next_obs, info["final_obs"])
        guard.watch("rewards", reward)
        rb.add(obs, actions, reward, info["final_obs"], terminated)
        obs.copy_(next_obs)
        step = run.step + N  # env steps so far, this one's included
        guard.check(step)

        # ---- learn ----------------------------------------------------------------------------------
        if step > args.learning_starts:
            beta = args.per_beta + (1.0 - args.per_beta) * min(1.0, step / args.total_steps)
            for _ in range(args.gradient_steps):
                b = rb.sample(args.batch_size, beta=beta)
                loss, q_mean, td_abs = loss_fn(q_net, target_net, args.gamma, args.action_gap, b)
                meter.add(td_loss=loss, q_mean=q_mean)
                guard.watch("TD loss", loss)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                step_fn()
                rb.update_priorities(b.indices, td_abs)
                updates += 1
                if updates % args.target_every == 0:
                    with torch.no_grad():
                        for p_t, p in zip(target_net.parameters(), q_net.parameters()):  # Polyak averaging of the target
                            p_t.lerp_(p, args.tau)
                guard.watch_params("parameters", q_net)
                guard.check(step)
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: observation normalization, the
    greedy action), rebuilt without an env; takes torch or numpy, batched or single observations."""
    return Policy.restore(path, ALGO, QNetwork, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
