"""Every learning experiment of the benchmark, one row each: `bench/run.py GROUP` trains a group's
rows over their seeds, `bench/report.py GROUP` turns their metrics into tables and figures. A new
experiment is a new row; a new task for a file is a new row.

A row runs `python algos/<algo>.py --env ENV --seed S --total-steps STEPS --eval-every EVERY ...`
with its `flags`; a peer's row (`algo = "<peer>:<name>"`) runs that peer's adapter,
bench/peers/<peer>.py, with the same flags in the peer's own venv (bench/run.py's `VENVS`). What a
row does not set is the file's default for the task (its `TASK_DEFAULTS` row), so the benchmark
measures what a user gets.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

EVAL_EPISODES = 10
GYM_SEED = 20_000  # the episodes of a final evaluation on gymnasium's env: seeds 20000, 20001, ...


@dataclass(frozen=True)
class Row:
    group: str
    algo: str  # algos/<algo>.py
    env: str
    steps: int
    eval_every: int
    seeds: tuple = (1, 2, 3)
    flags: dict = field(default_factory=dict)  # further flags (field names; underscores ok)
    name: str = ""  # its label in tables and file names (default: algo)
    # a stable solve: from the first evaluation at or above it, every one to the end is
    threshold: float | None = None
    save_every: int = 0  # checkpoints every this many env steps (long runs resume from them)
    # the row it is compared with: its label (the same env) or ENV:LABEL
    against: str = ""
    threads: int = 1  # torch and simulator threads of the run (0: every core)
    gym_final: bool = False  # the final policy also on gymnasium.make(env) (GYM_SEED's episodes)
    # a file of ours run in bench/.venv-NAME (run.py's VENVS): a simulator that cannot share the
    # project's venv
    venv: str = ""

    @property
    def label(self) -> str:
        return self.name or self.algo

    def key(self, seed: int) -> str:
        return f"{self.env.replace('/', '-')}__{self.label}__s{seed}"  # (MinAtar/, ALE/: no folder)

    @property
    def peer(self) -> str:
        """A peer's side (`algo = "sb3:ppo"`: "sb3"), run by bench/peers/<peer>.py in its own venv;
        "" for an algorithm file of ours."""
        return self.algo.split(":")[0] if ":" in self.algo else ""

    def command(self, seed: int, out_dir: str, python: str = sys.executable) -> list[str]:
        given = dict(
            env=self.env,
            seed=seed,
            total_steps=self.steps,
            eval_every=self.eval_every,
            eval_episodes=EVAL_EPISODES,
            save_every=self.save_every,
            out_dir=out_dir,
            quiet=True,
        )
        given.update(self.flags)
        cmd = [python, f"algos/{self.algo}.py"]
        if self.peer:  # its adapter: no log line; checkpoints where it keeps them (RESUMES)
            keeps = self.peer in RESUMES and self.save_every
            drop = ("quiet",) if keeps else ("save_every", "quiet")
            given = {k: v for k, v in given.items() if k not in drop}
            cmd = [python, f"bench/peers/{self.peer}.py", self.algo.split(":")[1]]
        return cmd + flags(given)


# the peers' adapters that write checkpoints (`--save-every`) and go on from one (`--resume`); a
# stopped run of any other peer starts again
RESUMES = {"sb3"}


def flags(settings: dict) -> list[str]:
    """Field names and values as an algorithm file's flags (`hidden=(512,)` -> `--hidden 512`)."""
    out = []
    for k, v in settings.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            out.append(flag if v else "--no-" + flag[2:])
        elif isinstance(v, (tuple, list)):
            out += [flag, *map(str, v)]
        else:
            out += [flag, str(v)]
    return out


PENDULUM_OFF = dict(num_envs=4, hidden=(128, 128))
CHASING_PPO = dict(num_envs=256, num_steps=32, num_minibatches=4)  # as tests/test_chasing.py
STOCK_PPO = dict(num_envs=256, num_steps=64, learning_rate=3e-4, num_minibatches=8, update_epochs=4)
PENDULUM_PPO = dict(
    num_envs=64,
    num_steps=64,
    num_minibatches=32,
    update_epochs=10,
    learning_rate=1e-3,
    gamma=0.9,
    norm_reward=True,
)
MUJOCO_PPO = dict(num_envs=64, num_steps=64, num_minibatches=16, update_epochs=10)
MUJOCO = ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5")


def _quick(group: str, long: bool) -> list[Row]:
    """The quick group (minutes on a laptop CPU: classic control and the seed documents' demo envs)
    or, `long`, the same tasks at longer budgets with Acrobot and A2C."""
    rows = [
        Row(group, "ppo_vec", "CartPole-v1", 10**6 if long else 400_000, 50_000 if long else 40_000,
            threshold=475),
        Row(group, "dqn", "CartPole-v1", 100_000, 10_000, threshold=475),  # the file's defaults
    ]  # fmt: skip
    if long:
        rows += [
            Row(group, "a2c", "CartPole-v1", 500_000, 25_000, threshold=475),
            Row(group, "ppo_vec", "Acrobot-v1", 1_000_000, 50_000),
            Row(group, "dqn", "Acrobot-v1", 300_000, 25_000),
        ]
    else:
        rows.append(
            Row(
                group, "ppo_vec", "Pendulum-v1", 150_000, 15_000, flags=PENDULUM_PPO, threshold=-200
            )
        )
    off = 20_000 if long else None
    rows += [
        Row(group, "sac", "Pendulum-v1", off or 12_000, 2_000, flags=PENDULUM_OFF, threshold=-200),
        Row(group, "td3", "Pendulum-v1", off or 14_000, 2_000, flags=PENDULUM_OFF, threshold=-200),
        Row(group, "ddpg", "Pendulum-v1", off or 12_000, 2_000, flags=PENDULUM_OFF, threshold=-200),
        Row(group, "ppo_vec", "Chasing-v0", 10**6 if long else 300_000,
            50_000 if long else 20_000, flags=CHASING_PPO),
        Row(group, "ppo_vec", "StockTrading-v0", 10**7 if long else 2 * 10**6,
            500_000 if long else 200_000, flags=STOCK_PPO),
    ]  # fmt: skip
    if long:
        off_mujoco = dict(num_envs=1, learning_starts=10_000, hidden=(256, 256))
        rows += [
            Row(group, a, e, 10**6, 50_000, flags=off_mujoco)
            for e in MUJOCO
            for a in ("sac", "td3")
        ]
        rows += [Row(group, "ppo_vec", e, 2 * 10**6, 100_000, flags=MUJOCO_PPO) for e in MUJOCO]
    return rows


# the off-policy family on Pendulum-v1 (REDQ: half-width members, learning from step 1,000)
OFFPOLICY = [
    Row("offpolicy", a, "Pendulum-v1", 10_000, 1_000, flags=dict(hidden=(128, 128)), threshold=-200)
    for a in ("ddpg", "td3", "sac", "modsac")
] + [
    Row("offpolicy", "redq", "Pendulum-v1", 5_000, 500,
        flags=dict(hidden=(64, 64), batch_size=128, learning_starts=1_000), threshold=-200),
]  # fmt: skip

# The seed documents' first-run tasks (issue 79), each file at its task defaults beside SB3 with
# RL Zoo's settings for the task (bench/peers/sb3.py); the budgets are RL Zoo's
# (shared/REFERENCES.md): SAC 500k on both, TD3 300k LunarLander and 1M BipedalWalker, PPO 1M and
# 5M. SAC's LunarLander row stops at 200k, 40% of its budget: 15-35 env steps/s at 400x300 on one
# core of a shared 2-core host, and a run's checkpoint does not outlive a 3-hour session (sac.py's
# row has no schedule: these are the 500k run's first 200k steps). BipedalWalker's off-policy rows
# (ours and SB3's) run alone on both cores: sac's 500k updates at 400x300 take 2.5 h or more on
# one thread, ~1.4 h on two (bench/NOTES.md#box2d-bipedalwalker), so a run ends inside a session
BOX2D = [
    Row("box2d", algo, env, steps, 10_000 if steps <= 10**6 else 50_000, seeds=(1, 2),
        name=name, threshold=threshold, save_every=50_000,
        against="" if name else f"sb3_{sb3}",
        threads=0 if env == "BipedalWalker-v3" and sb3 != "ppo" else 1)
    for env, threshold, budgets in (
        ("LunarLanderContinuous-v3", 200, dict(ppo_vec=10**6, sac=200_000, td3=300_000)),
        ("BipedalWalker-v3", 300, dict(ppo_vec=5 * 10**6, sac=500_000, td3=10**6)),
    )
    for ours, steps in budgets.items()
    for sb3 in [ours.replace("_vec", "")]
    for algo, name in ((ours, ""), (f"sb3:{sb3}", f"sb3_{sb3}"))
] + [
    # ppo_vec plus the H-term, and ppo_vec with a Beta policy, at ppo_vec's row, beside it
    # (bench/NOTES.md#box2d-bipedalwalker)
    *(Row("box2d", algo, "BipedalWalker-v3", 5 * 10**6, 50_000, seeds=(1, 2), threshold=300,
          save_every=50_000, against="ppo_vec") for algo in ("ppo_h", "ppo_beta")),
]  # fmt: skip

# SAC and TD3 at CleanRL's 1M-step MuJoCo setting (their task defaults), beside its figures
MUJOCO_OFFPOLICY = [
    Row("mujoco-offpolicy", algo, env, 10**6, 20_000, seeds=(1, 2), save_every=50_000)
    for env in ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5")
    for algo in ("sac", "td3")
]

# The H-term's seed variance: each H-term file beside its parent at the parent's test settings
# (tests/conftest.py), 8 seeds, equal env steps; hterm-hopper: Hopper-v5 at the papers' settings
HTERM_PENDULUM = {
    "ppo_vec": (dict(PENDULUM_PPO), 150_000),
    "sac": (dict(num_envs=4, hidden=(128, 128)), 10_000),
    "td3": (dict(num_envs=4, hidden=(128, 128)), 12_000),
}
HTERM_HOPPER = {
    "ppo_vec": (dict(num_envs=16, num_steps=128, num_minibatches=32, update_epochs=10,
                     learning_rate=3e-4, gamma=0.99, norm_obs=True, norm_reward=True), 10**6),
    "sac": (dict(num_envs=1, gradient_steps=1, learning_starts=5_000), 300_000),
    "td3": (dict(num_envs=1, gradient_steps=1, learning_starts=25_000), 300_000),
}  # fmt: skip
HTERM = [
    Row(group, algo, env, steps, steps // 5, seeds=tuple(range(1, 9)), flags=flags,
        against="" if algo == parent else parent, save_every=steps // 5 if steps > 10**5 else 0)
    for group, env, table in (("hterm", "Pendulum-v1", HTERM_PENDULUM),
                              ("hterm-hopper", "Hopper-v5", HTERM_HOPPER))
    for parent, (flags, steps) in table.items()
    for algo in (parent, {"ppo_vec": "ppo_h"}.get(parent, parent + "_h"))
]  # fmt: skip

# The multi-agent files on MPE simple_spread at their learning tests' settings, longer budgets
MARL = [
    Row("marl", algo, "simple_spread", steps, steps // 10, flags=dict(eval_episodes=100, **flags))
    for algo, steps, flags in (
        ("mappo", 600_000, dict(num_envs=64, num_steps=25, num_minibatches=4, update_epochs=10,
                                hidden=(128, 128))),
        ("vdn", 150_000, {}),
        ("qmix", 100_000, dict(gamma=0.95)),
        ("maddpg", 150_000, dict(num_envs=16)),
        ("matd3", 150_000, dict(num_envs=16)),
    )
]  # fmt: skip

# What a privileged critic buys: ppo_vec on CartPole through sensor noise, the critic reading the
# same noisy observation or (a `critic` group) the noise-free state
ASYMMETRIC = [
    Row("asymmetric", "ppo_vec", env, 200_000, 50_000, flags=dict(num_envs=64),
        against="" if env == "CartPoleNoisy-v0" else "CartPoleNoisy-v0:ppo_vec")
    for env in ("CartPoleNoisy-v0", "CartPoleNoisy-Privileged-v0")
]  # fmt: skip

# Beside Stable-Baselines3 with RL Zoo's settings (bench/peers/sb3.py, in its own venv), each file
# at its task defaults, held-out seeds 11-15 (the defaults were chosen on 1-5); SB3's DQN serves
# dqn and pqn. (The metrics of the first 5 seeds came from the old bench/peers.py, which evaluated
# our side on gymnasium's env too; `seconds` there are training seconds, `clock_seconds` the clock.)
PEERS = [
    row
    for algo, env, threshold, every, steps, sb3, sb3_steps in (
        ("ppo_vec", "CartPole-v1", 475, 2048, 300_000, "ppo", 100_000),
        ("dqn", "CartPole-v1", 475, 2048, 100_000, "dqn", 50_000),
        ("pqn", "CartPole-v1", 475, 2048, 200_000, "", 0),
        ("sac", "Pendulum-v1", -200, 1000, 20_000, "sac", 20_000),
        ("td3", "Pendulum-v1", -200, 1000, 20_000, "td3", 20_000),
    )
    for row in [
        Row("peers", algo, env, steps, every, tuple(range(11, 16)), threshold=threshold,
            against="sb3_" + (sb3 or "dqn")),
        *([Row("peers", f"sb3:{sb3}", env, sb3_steps, every, tuple(range(11, 16)),
               name=f"sb3_{sb3}", threshold=threshold)] if sb3 else []),
    ]
]  # fmt: skip

# The files the peers group does not show, each at its own task defaults, by the stable solve on
# held-out seeds 11-13, with the peers group's evaluation cadence. (The metrics were measured by the
# old bench/stable.py, which evaluated on gymnasium's env: `seconds` there are training seconds.)
STABLE = [
    Row("stable", algo, env, steps, every, (11, 12, 13), threshold=threshold)
    for env, threshold, every, files in (
        ("CartPole-v1", 475, 2048, dict(a2c=300_000, ppo_h=10**6, ppo_rnn=300_000,
                                        double_dqn=100_000, d3qn=100_000)),
        ("Pendulum-v1", -200, 1000, {f: 20_000 for f in ("ddpg", "ddpg_h", "td3_h", "fast_td3",
                                                          "sac_h", "modsac", "redq")}),
    )
    for algo, steps in files.items()
]  # fmt: skip

# Locomotion on a CPU (MuJoCo v5, the batched CPU backend): ppo_vec with its MuJoCo defaults at 64
# envs beside rsl_rl's PPO with IsaacLab's classic Ant/Humanoid config on the same env objects
# (bench/peers/rsl_rl.py), the same env steps, seeds 1-3, one core each (`--jobs 2`: a seed's two
# sides at once); on Hopper and HalfCheetah also ppo_vec with rsl_rl's adaptive-KL schedule, and the
# off-policy files at scale (16 envs x 8 updates of 256 per vector step, 150k steps: a budget set
# by the updates on one core). Threshold: CleanRL's 1M-step PPO score (Ant: 3000). The final policy
# is also evaluated on gymnasium's own env.
LOCOMOTION_TASKS = {"Hopper": (3 * 10**6, 2383), "HalfCheetah": (4 * 10**6, 1443),
                    "Walker2d": (4 * 10**6, 2288), "Ant": (3 * 10**6, 3000),
                    "Humanoid": (3 * 10**6, 716)}  # fmt: skip
AT_SCALE = dict(num_envs=16, batch_size=256, gradient_steps=8, learning_starts=10_000)
LOCOMOTION = [
    Row("locomotion", algo, f"{task}-v5", n, e, (1, 2, 3), flags, name, score, gym_final=True,
        against=against)
    for task, (steps, score) in LOCOMOTION_TASKS.items()
    for algo, name, n, e, flags, against in (
        ("ppo_vec", "", steps, 262_144, dict(num_envs=64), "rsl_rl"),
        ("rsl_rl:ppo", "rsl_rl", steps, 262_144, dict(num_envs=64), ""),
        *([("ppo_vec", "adaptive", steps, 262_144,
            dict(num_envs=64, lr_schedule="adaptive", desired_kl=0.01), "ppo_vec")]
          if task in ("Hopper", "HalfCheetah") else []),
        *([("fast_td3", "", 150_000, 25_000, AT_SCALE, ""),
           ("sac", "", 150_000, 25_000, dict(AT_SCALE, actor_lr=3e-4, critic_lr=3e-4), "")]
          if task in ("Hopper", "HalfCheetah", "Ant") else []),
    )
]  # fmt: skip
# RLlib's PPO (issue 60) with the ray repository's MuJoCo example settings on gymnasium's env
# (bench/peers/rllib.py, its own venv), beside ppo_vec at RLlib's 1M-step budget
RLLIB = [
    Row("rllib", algo, f"{task}-v5", 10**6, 131_072, (1, 2, 3), dict(num_envs=64), name,
        LOCOMOTION_TASKS[task][1], gym_final=True, against=against)
    for task in ("Hopper", "Ant", "Humanoid")
    for algo, name, against in (("ppo_vec", "", "rllib"), ("rllib:ppo", "rllib", ""))
]  # fmt: skip
# The design card's command, `python algos/ppo_vec.py --env Ant --num-envs 4096` (its GPU-sized
# defaults), on every core of a CPU
FLAGSHIP = [
    Row("flagship", "ppo_vec", "Ant-v5", 10**7, 1_048_576, (1,), dict(num_envs=4096),
        threshold=3000, threads=0, gym_final=True)
]  # fmt: skip

# One CUDA GPU (a lent machine: bench/gpu_lease.sh runs a row a call, capped by `--max-seconds`):
# ppo_vec's GPU defaults on MuJoCo Warp with its iteration captured as CUDA graphs (the default on
# CUDA), eager, compiled, at 16,384 envs and with Rudin et al.'s KL-adaptive rate from 1e-3
# (opt-in), each beside rsl_rl on the same Warp env; PPO on CartPole with 65,536 envs (16 steps a
# rollout); fast_td3 with its updates captured beside eager (learning from 5 steps of the 4096
# envs). Budgets far past a lease's minutes: a capped run keeps its curve and resumes from its last
# checkpoint.
GPU_TASKS = {"Ant": (3000, ("eager", "compile", "16k", "adaptive")),
             "Humanoid": (5000, ("eager", "16k", "adaptive"))}  # fmt: skip
GPU_VARIANTS = {"eager": dict(capture=False), "compile": dict(compile=True),
                "16k": dict(num_envs=16384), "adaptive": dict(lr_schedule="adaptive",
                                                              learning_rate=1e-3)}  # fmt: skip
GPU = [
    Row("gpu", algo, f"{task}-v5", 10**8, 1_048_576, (1,), {"num_envs": 4096, **flags,
        "device": "cuda"}, name, score, 4 * 1_048_576, against, threads=0, gym_final=True)
    for task, (score, variants) in GPU_TASKS.items()
    for algo, name, flags, against in (
        ("ppo_vec", "", {}, "rsl_rl"),
        *(("ppo_vec", f"ppo_vec-{v}", GPU_VARIANTS[v], "rsl_rl" + "-16k" * (v == "16k"))
          for v in variants),
        ("rsl_rl:ppo", "rsl_rl", dict(backend="warp"), ""),
        ("rsl_rl:ppo", "rsl_rl-16k", dict(backend="warp", num_envs=16384), ""),
        *((("fast_td3", "", dict(learning_starts=20480), "fast_td3-eager"),
           ("fast_td3", "fast_td3-eager", dict(learning_starts=20480, capture=False), ""))
          if task == "Ant" else ()),
    )
] + [
    Row("gpu", "ppo_vec", "CartPole-v1", 2 * 10**8, 8_388_608, (1,),
        dict(device="cuda", num_envs=65536, num_steps=16, num_minibatches=4), threshold=475,
        save_every=4 * 8_388_608, threads=0, gym_final=True)
]  # fmt: skip

# Do the MuJoCo defaults follow `--num-envs`? ppo_vec with nothing but the task, N, the budget and
# the seed (the rollout from `common.cli.rollout_shape`), on a CPU, final policy on gymnasium's env
NUM_ENVS = [
    Row("mujoco-num-envs", "ppo_vec", env, 10**6, 100_000,
        (1, 2, 3, 4) if env == "Hopper-v5" and n < 1024 else (1, 2), dict(num_envs=n),
        f"ppo_vec-n{n}", gym_final=True)
    for env in ("Hopper-v5", "Ant-v5") for n in (64, 256, 1024)
]  # fmt: skip
# Pipeline parallelism (`--pipeline`: explorer and learner on threads of their own) against the
# same run without it on one thread and on two: `learn` is the learning tests' shape (4 envs, 4
# updates a vector step: the learner dominates), `wide` a throughput shape (1024 envs, 1 update a
# vector step: exploring is a sizeable share; too few updates to learn the task)
PIPELINE_SETTINGS = {
    "learn": (10_000, dict(num_envs=4, gradient_steps=4, hidden=(128, 128))),
    "wide": (2 * 10**6, dict(num_envs=1024, gradient_steps=1, hidden=(256, 256),
                             learning_starts=20_000)),
}  # fmt: skip
PIPELINE = [
    Row("pipeline", algo, "Pendulum-v1", steps, steps, (1,), dict(flags, **extra),
        f"{algo}-{setting}{suffix}", threads=threads,
        against=f"{algo}-{setting}" if suffix else "")
    for setting, (steps, flags) in PIPELINE_SETTINGS.items()
    for algo in ("sac_podracer", "td3_podracer")
    for suffix, threads, extra in (("", 1, {}), ("-2threads", 2, {}),
                                   ("-pipeline", 1, dict(pipeline=True, pipeline_segment=16)))
]  # fmt: skip

# Learning from pixels: each image-capable file on MinAtar's five games with its MinAtar row (its
# paper's settings; 1M of their 10M steps, dqn 250k of 5M: the epsilon schedules shrink with the
# budget), PQN's full 10M on three, and Atari (10M frames of CleanRL's 40M) with the papers'
# settings as flags (`ATARI`: the files have no Atari rows until such runs back them)
MINATAR_GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
ATARI = {  # CleanRL's ppo_atari, the PQN paper's pqn_atari, CleanRL's dqn_atari
    "ppo_vec": dict(num_envs=8, num_steps=128, num_minibatches=4, update_epochs=4,
                    learning_rate=2.5e-4, clip_coef=0.1, clip_vloss=True, ent_coef=0.01,
                    hidden=(512,)),
    "pqn": dict(num_envs=128, num_steps=32, num_minibatches=32, update_epochs=2,
                learning_rate=2.5e-4, anneal_lr=False, q_lambda=0.65, end_e=0.001,
                exploration_fraction=0.1, hidden=(512,)),
    "dqn": dict(num_envs=4, gradient_steps=1, batch_size=32, learning_rate=1e-4,
                buffer_size=1_000_000, target_every=250, end_e=0.01, exploration_fraction=0.1,
                learning_starts=80_000, hidden=(512,)),
}  # fmt: skip
PIXELS = [
    *(Row("minatar", algo, f"MinAtar/{game}-v1", steps, steps // 10, seeds)
      for game in MINATAR_GAMES
      for algo, steps, seeds in (("pqn", 10**6, (1, 2, 3)), ("ppo_vec", 10**6, (1, 2, 3)),
                                 ("dqn", 250_000, (1,)))),
    *(Row("minatar-10m", "pqn", f"MinAtar/{game}-v1", 10**7, 250_000, (1,), save_every=10**6)
      for game in ("Asterix", "Breakout", "SpaceInvaders")),
    *(Row("atari", algo, f"ALE/{game}-v5", 2_500_000, 250_000, (1,), ATARI[algo],
          save_every=250_000)
      for game in ("Pong", "Breakout") for algo in ("ppo_vec", "pqn")),
]  # fmt: skip

# Population-based training (`python -m population`, bench/peers/population.py) against one run at
# equal total env steps on Pendulum-v1 (ppo_vec at its learning test's settings, constant learning
# rates: a round extends --total-steps, so annealing would restart every round): 4 members whose
# rates span good and poor values, 8 rounds of 8,192 steps; the single run at a typical member's
# rate
_POP = {k: v for k, v in PENDULUM_PPO.items() if k != "learning_rate"}
POPULATION = [
    Row("population", algo, "Pendulum-v1", 4 * 8 * 8_192, 8_192, (1, 2), flags, name,
        gym_final=True, threads=threads, against="single" if name != "single" else "")
    for algo, name, threads, flags in (
        *((f"population:{mode}", f"population-{mode}", 0,
           dict(_POP, anneal_lr=False, population=4, vary="learning_rate=3e-4,1e-3,3e-3,1e-2"))
          for mode in ("tournament", "generational")),
        ("ppo_vec", "single", 1, dict(_POP, anneal_lr=False, learning_rate=1e-3)),
    )
]  # fmt: skip

# ppo_vec on an external simulator: Unitree Go2 walking in Genesis (envs/genesis_go2.py through the
# rsl_rl-interface adapter) on its CPU backend, with the privileged critic group and without; sized
# for 2 cores: 64 envs x 24 steps (rsl_rl's locomotion horizon), 4 minibatches, 5 epochs,
# (256, 128, 64) networks, initial action std 0.5 (0.125 rad). Genesis runs in its own venv
# (genesis-world's pygel3d pins plotly < 6, skfolio needs plotly >= 6).
GO2 = dict(num_envs=64, num_steps=24, num_minibatches=4, update_epochs=5, learning_rate=1e-3,
           ent_coef=0.005, hidden=(256, 128, 64), norm_obs=True, init_log_std=-0.7,
           eval_episodes=16)  # fmt: skip
GENESIS = [
    Row("genesis", "ppo_vec", env, 3 * 10**6, 524_288, (1,), GO2, save_every=262_144, threads=0,
        venv="genesis")
    for env in ("GenesisGo2-v0", "GenesisGo2-NoCritic-v0")
]  # fmt: skip

# The JAX stack beside us on a CPU (issue 80): PureJaxRL's PPO (its file from a checkout, PUREJAXRL,
# in bench/.venv-jax; bench/peers/jax.py) with its own CartPole config, and ppo_vec with that config
# as flags and with its CartPole row (the file's defaults for the task); purejaxql's PQN on MinAtar
# Breakout (checkout PUREJAXQL) beside pqn's MinAtar row (the same settings: the PQN paper's), both
# to 240 of their 4,096-step iterations (~1M env steps; gymnax's game on its side, ours on ours)
PUREJAXRL_PPO = dict(num_envs=4, num_steps=128, num_minibatches=4, update_epochs=4,
                     learning_rate=2.5e-4, ent_coef=0.01, clip_vloss=True)  # fmt: skip
JAX = [
    # (no threshold: its loop has no evaluation inside, its one is the final policy's)
    Row("jax", "jax:ppo", "CartPole-v1", 500_000, 25_600, name="purejaxrl"),
    Row("jax", "ppo_vec", "CartPole-v1", 500_000, 25_600, flags=PUREJAXRL_PPO,
        name="ppo_vec-purejaxrl-config", threshold=475, against="purejaxrl"),
    Row("jax", "ppo_vec", "CartPole-v1", 300_000, 25_600, threshold=475, against="purejaxrl"),
    Row("jax", "jax:pqn", "MinAtar/Breakout-v1", 983_040, 49_152, name="purejaxql"),
    Row("jax", "pqn", "MinAtar/Breakout-v1", 983_040, 49_152, against="purejaxql"),
]  # fmt: skip

# a group's further columns: a metric its runs log, averaged over each run's rows (IQM over seeds)
COLUMNS = {"jax": {"compile_seconds": "compile s", "process_seconds": "whole process s"},
           "pipeline": {"pipeline_overlap": "overlap (both busy)", "explore_busy": "explorer busy",
                        "learn_busy": "learner busy"}}  # fmt: skip

ROWS: list[Row] = [*_quick("quick", False), *_quick("full", True), *OFFPOLICY, *BOX2D, *PEERS]
ROWS += [*MUJOCO_OFFPOLICY, *HTERM, *MARL, *ASYMMETRIC, *STABLE, *LOCOMOTION, *RLLIB, *FLAGSHIP]
ROWS += [*PIXELS, *NUM_ENVS, *PIPELINE, *POPULATION, *GENESIS, *JAX]
ROWS += GPU

# what each group is, for the report's first line
ABOUT = {
    "quick": "minutes on a laptop CPU: classic control and the seed documents' demo envs",
    "full": "hours on a CPU: the quick group's tasks at longer budgets, Acrobot, MuJoCo v5",
    "offpolicy": "the off-policy family on Pendulum-v1, hidden (128, 128) (REDQ half width)",
    "box2d": "the seed documents' first-run tasks at RL Zoo's budgets, each file's task defaults",
    "mujoco-offpolicy": "SAC and TD3 at 1M steps on MuJoCo v5 (CleanRL's setting, task defaults)",
    "hterm": "the H-term files beside their parents on Pendulum-v1, 8 seeds, equal env steps",
    "hterm-hopper": "the H-term files beside their parents on Hopper-v5, 8 seeds (hours)",
    "marl": "the multi-agent files on MPE simple_spread, 100 evaluation episodes",
    "asymmetric": "ppo_vec on noisy CartPole with and without a privileged critic group",
    "locomotion": "ppo_vec beside rsl_rl on five MuJoCo v5 tasks, one core each (about 13 hours)",
    "rllib": "ppo_vec beside RLlib's PPO (own venv) at 1M steps on Hopper, Ant and Humanoid",
    "flagship": "python algos/ppo_vec.py --env Ant --num-envs 4096 on every core, 10M steps",
    "minatar": "pqn, ppo_vec and dqn from pixels on MinAtar's five games, their MinAtar rows",
    "minatar-10m": "pqn's MinAtar row at its full 10M steps on three games (hours a run on a CPU)",
    "atari": "pqn and ppo_vec on ALE Pong and Breakout, 10M frames, the papers' settings as flags",
    "stable": "the files the peers group leaves out, task defaults, held-out seeds 11-13",
    "gpu": "one CUDA GPU: ppo_vec captured/eager/compiled/16k/adaptive beside rsl_rl on MuJoCo "
    "Warp, CartPole x65536, fast_td3 captured vs eager (a lease runs a row a call, capped)",
    "mujoco-num-envs": "ppo_vec's CPU defaults at --num-envs 64/256/1024, Hopper and Ant, 1M steps",
    "pipeline": "sac/td3_podracer with --pipeline vs without (1 and 2 threads) on Pendulum-v1",
    "population": "PPO populations (tournament, generational) vs one run, equal steps, Pendulum",
    "genesis": "ppo_vec on Genesis's Go2 (CPU backend, own venv), with and without a critic group",
    "jax": "PureJaxRL's PPO beside ppo_vec on CartPole, purejaxql's PQN beside pqn on MinAtar "
    "Breakout (their own venv and checkouts: PUREJAXRL, PUREJAXQL)",
    "peers": "beside Stable-Baselines3 (RL Zoo's settings, its own venv), held-out seeds 11-15",
}


def group(name: str) -> list[Row]:
    rows = [r for r in ROWS if r.group == name]
    if not rows:
        raise SystemExit(f"error: no group {name!r}; the groups: {', '.join(groups())}")
    return rows


def groups() -> list[str]:
    return list(dict.fromkeys(r.group for r in ROWS))


# Published numbers printed beside ours (shared/REFERENCES.md), by (env, algorithm file)
ZOO = "RL Zoo"
CLEANRL = "CleanRL"
REFERENCES = {
    ("CartPole-v1", "ppo_vec"): (ZOO, "500.0 +- 0.0 (100k)"),
    ("CartPole-v1", "dqn"): (ZOO, "500.0 +- 0.0 (50k)"),
    ("CartPole-v1", "a2c"): (ZOO, "500.0 +- 0.0 (500k)"),
    ("Acrobot-v1", "ppo_vec"): (ZOO, "-73.5 +- 18.2 (1M)"),
    ("Acrobot-v1", "dqn"): (ZOO, "-76.6 +- 11.8 (100k)"),
    ("Pendulum-v1", "ppo_vec"): (ZOO, "-172.2 +- 104.2 (100k)"),
    ("Pendulum-v1", "sac"): (ZOO, "-157.0 +- 88.7 (20k)"),
    ("Pendulum-v1", "td3"): (ZOO, "-151.9 +- 90.2 (20k)"),
    ("Pendulum-v1", "ddpg"): (ZOO, "-152.1 +- 94.3 (20k, Pendulum-v0)"),
    ("Pendulum-v1", "a2c"): (ZOO, "-163.0 +- 103.2 (1M, Pendulum-v0)"),
    ("LunarLanderContinuous-v3", "ppo_vec"): (ZOO, "270.9 +- 32.1 (1M, v2)"),
    ("LunarLanderContinuous-v3", "sac"): (ZOO, "260.4 +- 65.5 (500k, v2)"),
    ("LunarLanderContinuous-v3", "td3"): (ZOO, "207.5 +- 67.6 (300k, v2)"),
    ("BipedalWalker-v3", "ppo_vec"): (ZOO, "287.9 +- 2.4 (5M)"),
    ("BipedalWalker-v3", "sac"): (ZOO, "297.7 +- 33.1 (500k)"),
    ("BipedalWalker-v3", "td3"): (ZOO, "306.0 +- 56.9 (1M)"),
    ("Hopper-v5", "ppo_vec"): (ZOO, "2410.4 +- 10.0 (1M, v3); CleanRL v4: 2382.9 +- 271.7"),
    ("Hopper-v5", "sac"): (ZOO, "2325.5 +- 1129.7 (1M, v3); CleanRL v4: 2310.5 +- 342.8"),
    ("Hopper-v5", "td3"): (ZOO, "3606.4 +- 4.0 (1M, v3); CleanRL v4: 3134.6 +- 360.2"),
    ("HalfCheetah-v5", "ppo_vec"): (ZOO, "5819.1 +- 663.5 (1M, v3); CleanRL v4: 1442.6 +- 46.0"),
    ("HalfCheetah-v5", "sac"): (ZOO, "9535.5 +- 100.5 (1M, v3); CleanRL v4: 9634.9 +- 1423.7"),
    ("HalfCheetah-v5", "td3"): (ZOO, "9655.7 +- 969.9 (1M, v3); CleanRL v4: 9583.2 +- 126.1"),
    ("Walker2d-v5", "ppo_vec"): (ZOO, "3478.8 +- 821.7 (1M, v3); CleanRL v4: 2288.0 +- 571.8"),
    ("Walker2d-v5", "sac"): (ZOO, "3863.2 +- 254.3 (1M, v3); CleanRL v4: 3591.5 +- 911.3"),
    ("Walker2d-v5", "td3"): (ZOO, "4717.8 +- 46.3 (1M, v3); CleanRL v4: 4057.6 +- 658.8"),
    ("Ant-v5", "ppo_vec"): (
        ZOO,
        "1327.2 +- 451.6 (1M, v3); CleanRL Isaac Gym PPO: 3953 +- 667 (4096 envs, 240 s, GPU)",
    ),
    ("Ant-v5", "sac"): (ZOO, "4615.8 +- 1354.1 (1M, v3)"),
    ("Ant-v5", "td3"): (ZOO, "5813.3 +- 589.8 (1M, v3)"),
    ("Humanoid-v5", "sac"): (CLEANRL, "v4: 4996.3 +- 686.4 (1M)"),
    ("Humanoid-v5", "td3"): (CLEANRL, "v4: 5035.4 +- 21.7 (1M)"),
}
GYMNAX = "gymnax-blines"
REFERENCES.update({
    **{(f"MinAtar/{game}-v1", "ppo_vec"): (GYMNAX, f"PPO {score} at 10M")
       for game, score in (("Asterix", 15), ("Breakout", 28), ("Freeway", 58),
                           ("SpaceInvaders", 131))},
    ("ALE/Pong-v5", "ppo_vec"): (CLEANRL, "ppo_atari 20.4 at 40M frames"),
    ("ALE/Pong-v5", "pqn"): (CLEANRL, "pqn_atari 20.5 at 40M frames"),
    ("ALE/Breakout-v5", "ppo_vec"): (CLEANRL, "ppo_atari ~415 at 40M frames"),
    ("ALE/Breakout-v5", "pqn"): (CLEANRL, "pqn_atari ~385 at 40M frames"),
})  # fmt: skip
SOURCES = {
    ZOO: "RL Baselines3 Zoo `benchmark.md`: one trained agent, deterministic evaluation over ~150k "
    "steps, +- over episodes (not seeds), training budget in brackets; older gym "
    "versions where marked",
    CLEANRL: "CleanRL `docs/benchmark`: 3 seeds, 1M steps (Atari: 10M env steps), training-episode "
    "returns",
    GYMNAX: "gymnax's README: the PPO checkpoints of gymnax-blines, 10M env steps, an MLP on the "
    "flattened grid, on gymnax's JAX port of MinAtar (no sticky actions: a near game, not the "
    "same)",
}
