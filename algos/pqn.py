"""PQN: parallel Q-learning without a replay buffer or a target network, on vectorized environments.

PQN (Gallici et al., 2024, "Simplifying Deep Temporal Difference Learning", arXiv:2407.04811)
turns `algos/dqn.py` on-policy in the way PPO is: many sub-envs step together for `num_steps`, the
rollout's own Q(lambda) returns are the regression targets, and the network trains on that rollout
for a few epochs of minibatches, then the rollout is discarded. What makes it stable without a
target network or a replay buffer is LayerNorm after every hidden layer of the Q-network (the
paper's analysis: normalization keeps off-policy TD from diverging) and the decorrelation that many
parallel sub-envs give for free.

    G_t = r_t + gamma * (1 - terminated_t) * [(1 - lambda) * max_a Q(s_t+1, a) + lambda * G_t+1]

with G_t+1 replaced by max_a Q(s_t+1, a) at the rollout's end and where an episode ended (a
truncated episode bootstraps from its final observation, a terminated one from nothing).
Epsilon-greedy exploration annealed linearly, as DQN's; Q-values of the targets come from the
network of the rollout.

    python algos/pqn.py --env CartPole-v1     # its row in TASK_DEFAULTS
    python algos/pqn.py --env Acrobot-v1      # the dataclass defaults

The dataclass defaults were chosen on CartPole-v1 and Acrobot-v1, CartPole-v1's row by a later
sweep (bench/NOTES.md, "pqn defaults"). Fewer envs per update matter here: each env step is one
row of every update.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import torch
import torch.nn as nn

from common.cli import Clip, Count, Count0, Layers, Rate, RunArgs, Unit, cli, task_defaults
from common import encoders
from common.errors import UserError
from common.policy import Policy
from common.run import Run
from common.storage import Batch
from common.vec_env import check_single_agent
from common.wrappers import wrap_env

ALGO = "pqn"
PARENT, FAMILY = "dqn", "DQN"  # its lineage (CONTRIBUTING.md)


@dataclass
class Args(RunArgs):  # the run header (env, seed, device, logging, checkpoints): common.cli.RunArgs
    env: str = "CartPole-v1"  # an env id with a Discrete action space
    num_envs: int = 16  # number of parallel sub-environments
    total_steps: Count = 200_000  # total environment steps (summed over sub-envs)
    eval_every: Count0 = 20_000  # evaluate the policy every this many env steps (0: at the end)
    save_every: Count0 = 50_000  # write the checkpoint every this many env steps (0: at the end)
    compile: bool = False  # torch.compile the TD loss, the optimizer step and the greedy policy

    # PQN
    num_steps: Count = 32  # rollout horizon per sub-env per iteration
    learning_rate: Rate = 1e-3  # Adam learning rate
    anneal_lr: bool = True  # anneal the learning rate linearly to 0 over the run
    num_minibatches: Count = 4  # minibatches per epoch over a rollout
    update_epochs: Count = 4  # epochs over each rollout
    gamma: Unit = 0.99  # discount factor
    q_lambda: Unit = 0.8  # lambda of the Q(lambda) returns (0: one-step targets)
    start_e: Unit = 1.0  # initial exploration epsilon
    end_e: Unit = 0.05  # final exploration epsilon
    exploration_fraction: Unit = 0.5  # fraction of total_steps over which epsilon decays linearly
    max_grad_norm: Clip = 10.0  # global gradient-norm clip
    hidden: Layers = (128, 128)  # hidden layer sizes (each followed by LayerNorm and ReLU)
    norm_obs: bool = False  # normalize observations with running statistics


# Per-task defaults over the ones above, from held-out sweeps (bench/sweep.py; bench/NOTES.md,
# "pqn defaults"); `--env X --help` lists them
# fmt: off
TASK_DEFAULTS = {
    "CartPole-v1": dict(exploration_fraction=0.05, learning_rate=2.5e-3, num_envs=32),
    # the paper's MinAtar settings (its code's pqn_minatar config); the network: MinAtar's conv
    # stack and one hidden layer of 128, as the MinAtar paper's DQN
    **{f"MinAtar/{game}-v1": dict(num_envs=128, num_steps=32, num_minibatches=32, update_epochs=2,
                                  learning_rate=5e-4, q_lambda=0.65, exploration_fraction=0.1,
                                  hidden=(128,), total_steps=10_000_000, eval_every=250_000,
                                  save_every=1_000_000)
       for game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")},
}
# fmt: on
default_args = task_defaults(Args, TASK_DEFAULTS)


def check_args(args: Args, env) -> None:  # (each field's own range: common.cli.check_ranges)
    check_single_agent(env, args.env, ALGO, masks=True, flat=True, images=True)
    if not isinstance(env.single_action_space, gym.spaces.Discrete):
        raise UserError(f"{ALGO} needs a Discrete action space (Box: ppo_vec.py, sac.py, td3.py)")
    if args.num_envs * args.num_steps % args.num_minibatches:
        raise UserError(
            f"num_envs x num_steps is not divisible by --num-minibatches {args.num_minibatches}"
        )


MASKED_Q = -1e9  # a forbidden action's Q-value: never the greedy action nor the target's max


class QNetwork(nn.Module):
    def __init__(self, obs_dim, n_actions: int, hidden=(128, 128)):
        super().__init__()
        # an image space (obs_dim): a conv encoder first, LayerNorm after its layers too
        layers, width = encoders.layers(obs_dim, norm=True)
        sizes = [width, *hidden]
        for a, b in zip(sizes[:-1], sizes[1:]):
            # LayerNorm: what lets PQN drop the target network
            layers += [nn.Linear(a, b), nn.LayerNorm(b), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], n_actions))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: dict) -> torch.Tensor:
        """Q-values from the `policy` group; an action the env's mask (if any) forbids gets
        MASKED_Q."""
        q = self.net(obs["policy"])
        return q.masked_fill(~obs["action_mask"], MASKED_Q) if "action_mask" in obs else q


def td_loss(q_net: QNetwork, obs, actions, returns):
    """Squared error between Q(s, a) and the Q(lambda) return of the rollout (one minibatch)."""
    q = q_net(obs).gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    return 0.5 * (q - returns).square().mean(), q.detach().mean()


@torch.no_grad()
def q_lambda_returns(rewards, terminated, dones, next_max_q, gamma: float, lam: float):
    """Q(lambda) returns over a [T, N] rollout, backwards; `next_max_q[t]` = max_a Q(s_t+1, a)
    (the final observation where the episode ended at t): the rollout's last step and an episode's
    last step bootstrap from it alone, the others mix it with the next step's return."""
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
    q_net = QNetwork(**net).to(device)
    # the learning rate is a tensor that annealing fills in place, so that a compiled optimizer
    # step covers it (float64: a Python float's arithmetic); capturable: Adam's step stays on CUDA
    lr = torch.tensor(args.learning_rate, dtype=torch.float64, device=device)
    adam = dict(capturable=True) if device.type == "cuda" else dict(fused=device.type == "cpu")
    optimizer = torch.optim.Adam(q_net.parameters(), lr=lr, **adam)
    obs = Batch(env.reset(seed=args.seed)[0]).clone()  # where the next step starts: a fixed buffer
    T, N = args.num_steps, args.num_envs
    batch_size = T * N
    # storage for each observation group, the actions, rewards and flags
    f = torch.zeros(N, device=device)
    store = Batch.zeros(T, obs=obs, next_obs=obs, actions=f.long())
    store.update(Batch.zeros(T, rewards=f, terminated=f, dones=f))

    def opt_step():  # gradient clipping and the Adam step
        nn.utils.clip_grad_norm_(q_net.parameters(), args.max_grad_norm)
        optimizer.step()

    loss_fn, q_fn = run.compile(td_loss), run.compile(q_net)  # --compile, else as they are
    step_fn = run.compile(opt_step, graphs=False)

    num_iterations = args.total_steps // batch_size
    # the deployable policy: normalizer, greedy action of the Q-network (common/policy.py)
    policy = Policy.of(q_net, net, env, act="greedy")
    # the state a checkpoint holds and a resumed run restores, named once
    run.start(env, dict(model=q_net, optimizer=optimizer, env=env, next_obs=obs), policy)
    guard, group = run.guard, optimizer.param_groups[0]  # (resumed: the loaded group)
    meter = run.meter("td_loss", "q_mean")
    for iteration in run.iterations(
        num_iterations, batch_size, lambda: dict(epsilon=epsilon_at(args, run.step))
    ):
        if args.anneal_lr:
            group["lr"].fill_(args.learning_rate * (1.0 - iteration / num_iterations))
        # ---- rollout: epsilon-greedy over all sub-envs at once ----------------------------------
        eps = epsilon_at(args, run.step)
        with torch.no_grad():
            for t in range(T):
                greedy = q_fn(obs).argmax(-1)
                if "action_mask" in obs:  # uniform over the allowed actions
                    random_actions = (
                        torch.rand(N, n_actions, device=device) + obs["action_mask"]
                    ).argmax(-1)
                else:
                    random_actions = torch.randint(0, n_actions, (N,), device=device)
                explore = torch.rand(N, device=device) < eps
                actions = torch.where(explore, random_actions, greedy)
                store[t] = dict(obs=obs, actions=actions)
                next_obs, reward, terminated, truncated, info = env.step(actions)
                # s_t+1 of step t: the final observation where the episode ended
                done, final = terminated | truncated, info["final_obs"]
                s_next = {  # (each group's rank)
                    k: torch.where(done.view(N, *(1,) * (x.dim() - 1)), final[k], x)
                    for k, x in next_obs.items()
                }
                store[t] = dict(next_obs=s_next, rewards=reward, terminated=terminated, dones=done)
                obs.copy_(next_obs)
            next_max_q = q_fn(store["next_obs"].flatten()).max(-1).values.view(T, N)
            r, term, d = store["rewards"], store["terminated"], store["dones"]
            returns = q_lambda_returns(r, term, d, next_max_q, args.gamma, args.q_lambda)

        # ---- learn: epochs of minibatches over the rollout, which is then discarded -------------
        b = Batch(obs=store["obs"], actions=store["actions"], returns=returns).flatten()
        for epoch in range(args.update_epochs):
            for mb in b.minibatches(args.num_minibatches):
                loss, q_mean = loss_fn(q_net, mb["obs"], mb["actions"], mb["returns"])
                meter.add(td_loss=loss, q_mean=q_mean)
                guard.watch("TD loss", loss)
                optimizer.zero_grad()
                loss.backward()
                step_fn()
                guard.watch_params("parameters", q_net)
                guard.check(run.step + batch_size)
    return run.finish(env)


def load_policy(path: str, device: str = "cpu"):
    """The deployable policy of a checkpoint of this file (common/policy.py: normalization, the
    greedy action), rebuilt without an env."""
    return Policy.restore(path, ALGO, QNetwork, device)


if __name__ == "__main__":
    main(cli(Args, __doc__, defaults_for=default_args))
