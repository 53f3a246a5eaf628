"""PQN: parallel Q-learning without a replay buffer or a target network, on vectorized environments.

PQN (Gallici et al., 2024, "Simplifying Deep Temporal Difference Learning", arXiv:2407.04811) is `algos/dqn.py`
turned on-policy in the way PPO is: many sub-envs step together for `num_steps`, the rollout's own
Q(lambda) returns are the regression targets, and the network trains on that rollout for a few epochs of
minibatches, then the rollout is discarded. What makes it stable without a target network or a replay
buffer is LayerNorm after every hidden layer of the Q-network (the paper's analysis: normalization keeps
off-policy TD from diverging) and the decorrelation that many parallel sub-envs give for free.

    G_t = r_t + gamma * (1 - terminated_t) * [(1 - lambda) * max_a Q(s_t+1, a) + lambda * G_t+1]

with G_t+1 replaced by max_a Q(s_t+1, a) at the rollout's end and where an episode ended (a truncated
episode bootstraps from its true final observation, a terminated one from nothing). Epsilon-greedy
exploration annealed linearly, as DQN's; Q-values of the targets come from the network of the rollout.

    python algos/pqn.py --env CartPole-v1     # its row in TASK_DEFAULTS
    python algos/pqn.py --env Acrobot-v1      # the dataclass defaults

The dataclass defaults (16 envs x 32 steps, 4 epochs x 4 minibatches, lambda 0.8, epsilon to 0.05 over half the
run; what Acrobot-v1 gets) were chosen on CartPole-v1 and Acrobot-v1; CartPole-v1's row in TASK_DEFAULTS (32 envs,
epsilon over 5%, lr 2.5e-3) came from a later sweep (bench/README.md#defaults-the-evidence). Fewer envs per update
matter here: each env step is one row of every update.
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

from common.cli import Clip, Count, Count0, Layers, Rate, RunArgs, Unit, cli
from common.device import compile_fn
from common.errors import UserError
from common.logger import Meter
from common.policy import Policy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent, group_spaces
from common.wrappers import wrap_env

ALGO = "pqn"


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    env: str = "CartPole-v1"
    """environment id with a Discrete action space (torch-native or any gymnasium id)"""
    num_envs: int = 16
    total_steps: Count = 200_000
    eval_every: Count0 = 20_000
    save_every: Count0 = 50_000
    compile: bool = False
    """torch.compile the TD loss (forward and backward), the optimizer step
    (learning-rate annealing included) and the greedy policy step (on CUDA: CUDA graphs, the optimizer step's excepted)"""

    # PQN
    num_steps: Count = 32
    """rollout horizon per sub-env per iteration"""
    learning_rate: Rate = 1e-3
    """Adam learning rate"""
    anneal_lr: bool = True
    """anneal the learning rate linearly to 0 over the run"""
    num_minibatches: Count = 4
    """minibatches per epoch over a rollout"""
    update_epochs: Count = 4
    """epochs over each rollout"""
    gamma: Unit = 0.99
    """discount factor"""
    q_lambda: Unit = 0.8
    """lambda of the Q(lambda) returns (0: one-step targets)"""
    start_e: Unit = 1.0
    """initial exploration epsilon"""
    end_e: Unit = 0.05
    """final exploration epsilon"""
    exploration_fraction: Unit = 0.5
    """fraction of total_steps over which epsilon decays linearly"""
    max_grad_norm: Clip = 10.0
    """global gradient-norm clip"""
    hidden: Layers = (128, 128)
    """hidden layer sizes of the Q-network (each followed by LayerNorm and ReLU)"""
    norm_obs: bool = False
    """normalize observations with running statistics (saved in the checkpoint)"""


# Per-task defaults over the ones above: the settings a held-out sweep chose for a task (bench/sweep.py: tuned on
# seeds 101-103, reported on seeds 1-5; bench/results/sweeps/). `--env X --help` lists the task's defaults.
TASK_DEFAULTS: dict[str, dict] = {
    # the settings a held-out sweep chose (bench/README.md#defaults-the-evidence)
    "CartPole-v1": dict(exploration_fraction=0.05, learning_rate=2.5e-3, num_envs=32),
}


def default_args(env_id: str, num_envs: int | None = None, device: str = "auto") -> Args:
    """The defaults for a task: `Args()` with the task's row of `TASK_DEFAULTS`, if it has one."""
    return replace(Args(env=env_id), **TASK_DEFAULTS.get(env_id, {}))


def check_args(args: Args, env) -> None:
    check_single_agent(env, args.env, ALGO, masks=True)
    if not isinstance(env.single_action_space, gym.spaces.Discrete):
        raise UserError(
            f"pqn needs a Discrete action space; {args.env} has {env.single_action_space}. "
            f"Use algos/ppo_vec.py (any action space) or, for continuous actions, sac.py or td3.py."
        )
    shape = group_spaces(env.single_observation_space)[0].shape  # the policy group's
    if len(shape) != 1:
        raise UserError(f"pqn's MLP needs flat observations, {args.env} has shape "
                         f"{shape}; flatten them in the env")
    if args.num_steps <= 0 or args.num_minibatches <= 0 or args.update_epochs <= 0:
        raise UserError("--num-steps, --num-minibatches and --update-epochs must be positive")
    batch = args.num_envs * args.num_steps
    if batch % args.num_minibatches:
        raise UserError(f"num_envs * num_steps = {batch} is not divisible by --num-minibatches "
                         f"{args.num_minibatches}; pick a divisor of {batch}")
    if args.total_steps < batch:
        raise UserError(f"--total-steps {args.total_steps} is below one rollout (num_envs * num_steps = {batch})")
    if not 0.0 <= args.q_lambda <= 1.0:
        raise UserError(f"--q-lambda must be in [0, 1], got {args.q_lambda}")


MASKED_Q = -1e9  # the Q-value of a forbidden action (env's action mask): never the greedy action nor the target's max


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, hidden=(128, 128)):
        super().__init__()
        sizes, layers = [obs_dim, *hidden], []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.LayerNorm(b), nn.ReLU()]  # LayerNorm: what lets PQN drop the target net
        layers.append(nn.Linear(sizes[-1], n_actions))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: dict) -> torch.Tensor:
        """Q-values from the `policy` group; an action the env's mask (if any) forbids gets MASKED_Q."""
        q = self.net(obs["policy"])
        return q.masked_fill(~obs["action_mask"], MASKED_Q) if "action_mask" in obs else q


def td_loss(q_net: QNetwork, obs, actions, returns):
    """Squared error between Q(s, a) and the Q(lambda) return of the rollout (one minibatch)."""
    q = q_net(obs).gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    return 0.5 * (q - returns).square().mean(), q.detach().mean()


@torch.no_grad()
def q_lambda_returns(rewards, terminated, dones, next_max_q, gamma: float, lam: float):
    """Q(lambda) returns over a [T, N] rollout, backwards; `next_max_q[t]` = max_a Q(s_t+1, a) (the true final
    observation where the episode ended at t): the rollout's last step and an episode's last step bootstrap
    from it alone, the others mix it with the next step's return."""
    returns = torch.zeros_like(rewards)
    nxt = next_max_q[-1]
    for t in reversed(range(rewards.shape[0])):
        mix = torch.zeros_like(nxt) if t == rewards.shape[0] - 1 else lam * (1.0 - dones[t])
        boot = next_max_q[t] + mix * (nxt - next_max_q[t])
        returns[t] = nxt = rewards[t] + gamma * (1.0 - terminated[t]) * boot
    return returns


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
    q_net = QNetwork(**net).to(device)
    # the learning rate is a tensor that annealing fills in place, so that a compiled optimizer step covers it (float64:
    # the same arithmetic as a Python float); capturable on CUDA: Adam's step counter stays on the device; fused on
    # the CPU: one kernel for the step, not a loop of small ops
    lr = torch.tensor(args.learning_rate, dtype=torch.float64, device=device)
    adam_kw = dict(capturable=True) if device.type == "cuda" else dict(fused=device.type == "cpu")
    optimizer = torch.optim.Adam(q_net.parameters(), lr=lr, **adam_kw)
    T, N = args.num_steps, args.num_envs
    batch_size, minibatch_size = T * N, T * N // args.num_minibatches
    # where the next step starts (its groups), a fixed buffer; the rollout storage on the device
    obs = Batch(env.reset(seed=args.seed)[0]).clone()
    f = torch.zeros(N, device=device)
    store = Batch.zeros(T, obs=obs, next_obs=obs, actions=f.long(), rewards=f, terminated=f, dones=f)

    def opt_step():  # gradient clipping and the Adam step
        nn.utils.clip_grad_norm_(q_net.parameters(), args.max_grad_norm)
        optimizer.step()

    loss_fn, q_fn, step_fn = td_loss, q_net, opt_step
    if args.compile:
        loss_fn, q_fn = compile_fn(td_loss, device), compile_fn(q_net, device)
        step_fn = compile_fn(opt_step, device, graphs=False)

    num_iterations = args.total_steps // batch_size
    # the deployable policy: observation normalizer, greedy action of the Q-network (common/policy.py)
    policy = Policy.of(q_net, net, env, act="greedy")
    # the state a checkpoint holds and a resumed run restores, named once
    run.start(env, dict(model=q_net, optimizer=optimizer, env=env, next_obs=obs), policy)
    guard = run.guard
    meter = Meter(device, "td_loss", "q_mean")  # summed on the device, read at the logging tick
    # after each iteration the shell counts its steps, checks for NaN, evaluates, logs and checkpoints on their ticks
    for iteration in run.iterations(num_iterations, batch_size, metrics=lambda: dict(**meter.pop(), epsilon=eps)):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"].fill_(args.learning_rate * (1.0 - iteration / num_iterations))
        # ---- rollout: epsilon-greedy over all sub-envs at once ------------------------------------
        eps = epsilon_at(args, run.step)
        with torch.no_grad():
            for t in range(T):
                greedy = q_fn(obs).argmax(-1)
                random_actions = torch.randint(0, n_actions, (N,), device=device) if "action_mask" not in obs else \
                    (torch.rand(N, n_actions, device=device) + obs["action_mask"]).argmax(-1)  # uniform, allowed only
                explore = torch.rand(N, device=device) < eps
                actions = torch.where(explore, random_actions, greedy)
                store[t] = dict(obs=obs, actions=actions)
                next_obs, reward, terminated, truncated, info = env.step(actions)
                guard.watch("observations", next_obs, info["final_obs"])
                guard.watch("rewards", reward)
                done = terminated | truncated
                s_next = {k: torch.where(done.unsqueeze(-1), info["final_obs"][k], x) for k, x in next_obs.items()}
                store[t] = dict(next_obs=s_next, rewards=reward, terminated=terminated, dones=done)  # s_t+1 of step t
                obs.copy_(next_obs)
            next_max_q = q_fn(store["next_obs"].flatten()).max(-1).values.view(T, N)
            returns = q_lambda_returns(store["rewards"], store["terminated"], store["dones"], next_max_q, args.gamma,
                                       args.q_lambda)

        # ---- learn: epochs of minibatches over the rollout, which is then discarded --------------------
        b = Batch(obs=store["obs"], actions=store["actions"], returns=returns).flatten()
        for epoch in range(args.update_epochs):
            perm = torch.randperm(batch_size, device=device)
            for start in range(0, batch_size, minibatch_size):
                mb = b[perm[start:start + minibatch_size]]
                loss, q_mean = loss_fn(q_net, mb["obs"], mb["actions"], mb["returns"])
                meter.add(td_loss=loss, q_mean=q_mean)
                guard.watch("TD loss", loss)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                step_fn()
                guard.watch_params("parameters", q_net)
                guard.check(run.step + batch_size)
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: observation normalization, the
    greedy action), rebuilt without an env; takes torch or numpy, batched or single observations."""
    return Policy.restore(path, ALGO, QNetwork, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
