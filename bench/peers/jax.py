"""The JAX stack beside us, each file from a checkout of its repository, unchanged, in its own venv
(bench/.venv-jax, `VENVS`), writing our metrics schema; nothing of ours is imported here:

- `ppo`: PureJaxRL's PPO (luchris429/purejaxrl, `purejaxrl/ppo.py`, checkout in `PUREJAXRL`), its
  whole training loop one XLA program; its settings are its `__main__` config, restated below (the
  file keeps them under `if __name__ == "__main__"`);
- `pqn`: purejaxql's PQN on MinAtar (mttga/purejaxql, `purejaxql/pqn_minatar.py`, checkout in
  `PUREJAXQL`), its settings `config/alg/pqn_minatar.yaml` restated below (the file reads them
  through hydra), its decays over the row's env steps (the yaml's are over 10M).

    PUREJAXRL=/path/to/purejaxrl bench/.venv-jax/bin/python bench/peers/jax.py ppo \\
        --env CartPole-v1 --seed 1 --total-steps 500000 --eval-every 25000 --eval-episodes 10 \\
        --out-dir runs

Shims, outside their files: gymnax 1.0's step returns terminated and truncated apart (`FiveTuple`
joins them into the `done` the files expect); brax and navix, which PureJaxRL's wrappers.py imports
for wrappers a gymnax task never uses, and hydra, omegaconf and wandb, which pqn_minatar.py imports
for its command line and logging (off), are empty stand-ins. Timing: `compile_seconds` is jit's
trace and compile (`lower(...).compile()`), `seconds` the compiled loop's run alone, and
`process_seconds` the whole process from its start. A row per update carries the training
episodes' mean return (`return`, the file's own log), its seconds a share of the loop's time in
proportion to its updates (every update is the same program). PPO's loop has no evaluations inside:
its final policy (greedy) is evaluated as ours are, `--eval-episodes` on gymnasium's env seeded
seed + 10000 (`eval_return`), and 10 from 20000 (`gym_return`). PQN's tests inside the loop are off
(`TEST_DURING_TRAINING`: 128 envs x 1,000 steps each, more env steps than training's at a test every
5%, inside the timed program): its final policy (greedy) plays `--eval-episodes` of gymnax's game.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

START = time.perf_counter()
if os.environ.get("OMP_NUM_THREADS") == "1":  # the runner's one thread a run: XLA's too
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                          "intra_op_parallelism_threads=1")  # fmt: skip
if Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:  # run as a script
    del sys.path[0]  # not this folder: `import jax` must find jax, not this file
CONFIG = dict(LR=2.5e-4, NUM_ENVS=4, NUM_STEPS=128, UPDATE_EPOCHS=4, NUM_MINIBATCHES=4,
              GAMMA=0.99, GAE_LAMBDA=0.95, CLIP_EPS=0.2, ENT_COEF=0.01, VF_COEF=0.5,
              MAX_GRAD_NORM=0.5, ACTIVATION="tanh", ANNEAL_LR=True, DEBUG=False)  # fmt: skip
PQN_MINATAR = dict(NUM_ENVS=128, NUM_STEPS=32, EPS_START=1.0, EPS_FINISH=0.05, EPS_DECAY=0.1,
                   NUM_MINIBATCHES=32, NUM_EPOCHS=2, NORM_TYPE="layer_norm", LR=5e-4,
                   MAX_GRAD_NORM=10, LR_LINEAR_DECAY=True, GAMMA=0.99, LAMBDA=0.65,
                   WANDB_MODE="disabled")  # fmt: skip


class FiveTuple:
    """The step-API shim: gymnax 1.0 returns (obs, state, reward, terminated, truncated, info) where
    the files expect the older (obs, state, reward, done, info); done = either, as it was, and the
    info without the `final_observation` the older API did not have (pqn_minatar.py averages every
    info entry over its test episodes)."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        info = {k: v for k, v in info.items() if k != "final_observation"}
        return obs, state, reward, terminated | truncated, info


def greedy_returns(apply, params, env_id: str, episodes: int, seed: int) -> list[float]:
    """The policy's greedy action on gymnasium's env, one episode at a time from `seed`."""
    import gymnasium as gym
    import jax
    import numpy as np

    env, out = gym.make(env_id), []
    act = jax.jit(lambda obs: apply(params, obs)[0].logits.argmax(-1))
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            obs, r, term, trunc, _ = env.step(int(act(np.asarray(obs, dtype=np.float32))))
            total, done = total + float(r), term or trunc
        out.append(total)
    return out


def stepping(game: str, num_envs: int, seconds: float, chunk: int = 100) -> float:
    """gymnax's MinAtar `game` at `num_envs` sub-envs as PureJaxRL steps it: `vmap` over the
    sub-envs, `chunk` steps of uniform random actions a compiled `scan`, auto-reset inside; its
    env-steps/s after the compile (the observation is built every step, as an agent needs it)."""
    import gymnax
    import jax

    env, params = gymnax.make(f"{game}-MinAtar")
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    actions = env.action_space(params).n

    @jax.jit
    def run(state, key):
        def body(carry, _):
            state, key = carry
            key, k_act, k_step = jax.random.split(key, 3)
            act = jax.random.randint(k_act, (num_envs,), 0, actions)
            obs, state, *_ = step(jax.random.split(k_step, num_envs), state, act, params)
            return (state, key), obs.sum()

        return jax.lax.scan(body, (state, key), None, chunk)

    key = jax.random.PRNGKey(0)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)
    carry = jax.block_until_ready(run(state, key))[0]  # the compile
    carry = jax.block_until_ready(run(*carry))[0]  # and again: the state it returns may retrace
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        carry = jax.block_until_ready(run(*carry))[0]
        calls += 1
    return calls * chunk * num_envs / (time.perf_counter() - t0)


def checkout(var: str, repo: str, file: str) -> Path:
    """The folder of `file` in the checkout named by `var`, put first on sys.path."""
    path = Path(os.environ.get(var, "")) / file
    if not os.environ.get(var) or not path.is_file():
        raise SystemExit(f"error: set {var} to a checkout of {repo} (its {file} is run as it is)")
    sys.path.insert(0, str(path.parent))
    return path


def stand_ins(*names: str):
    """Empty modules in place of packages a file imports for what the run does not use."""
    import types

    for name in names:
        sys.modules.setdefault(name, types.ModuleType(name))
    return [sys.modules[n] for n in names]


def compiled(make_train, config: dict, seed: int):
    """(the file's training output, compile seconds, run seconds), one seed, no vmap."""
    import jax

    rng = jax.random.PRNGKey(seed)
    t0 = time.perf_counter()
    train = jax.jit(make_train(config)).lower(rng).compile()
    compile_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(train(rng))
    return out, compile_seconds, time.perf_counter() - t0


def ppo(a) -> list[dict]:
    checkout("PUREJAXRL", "luchris429/purejaxrl", "purejaxrl/ppo.py")
    brax, envs, wrappers, training, _ = stand_ins(
        "brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training", "navix"
    )
    brax.envs = envs
    training.EpisodeWrapper = training.AutoResetWrapper = object
    import gymnax
    import jax
    import numpy as np

    make = gymnax.make
    gymnax.make = lambda *args, **kw: (lambda env, params: (FiveTuple(env), params))(
        *make(*args, **kw)
    )
    from ppo import ActorCritic, make_train  # noqa: I001 (the checkout's file)

    config = dict(CONFIG, ENV_NAME=a.env, TOTAL_TIMESTEPS=a.total_steps)
    out, compile_seconds, seconds = compiled(make_train, config, a.seed)
    info = jax.tree_util.tree_map(np.asarray, out["metrics"])  # [updates, steps, envs]
    updates, per = info["returned_episode"].shape[0], config["NUM_STEPS"] * config["NUM_ENVS"]
    rows = []
    for u in range(updates):
        ended = info["returned_episode"][u]
        row = dict(step=(u + 1) * per, seconds=round(seconds * (u + 1) / updates, 4))
        if ended.any():
            row["return"] = float(info["returned_episode_returns"][u][ended].mean())
        rows.append(row)
    params = out["runner_state"][0].params
    apply = ActorCritic(2, activation=config["ACTIVATION"]).apply  # (CartPole's two actions)
    r = greedy_returns(apply, params, a.env, a.eval_episodes, a.seed + 10_000)
    rows[-1].update(eval_return=float(np.mean(r)), eval_return_std=float(np.std(r)),
                    compile_seconds=round(compile_seconds, 3), jax=jax.__version__,
                    process_seconds=round(time.perf_counter() - START, 3))  # fmt: skip
    g = greedy_returns(apply, params, a.env, 10, 20_000)
    rows.append(dict(step=rows[-1]["step"], gym_return=float(np.mean(g)),
                     gym_return_std=float(np.std(g)), gym_returns=g))  # fmt: skip
    return rows


def greedy_minatar(network, variables, game: str, episodes: int, seed: int) -> list[float]:
    """The Q-network's greedy returns on gymnax's `game`, `episodes` envs at once, one episode each
    (to the game's step limit) from keys of `seed`."""
    import gymnax
    import jax

    env, params = gymnax.make(f"{game}-MinAtar")
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    key = jax.random.PRNGKey(seed)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, episodes), params)

    def body(carry, _):
        obs, state, key, total, alive = carry
        key, k = jax.random.split(key)
        act = network.apply(variables, obs, train=False).argmax(-1)
        obs, state, r, term, trunc, _ = step(jax.random.split(k, episodes), state, act, params)
        return (obs, state, key, total + r * alive, alive & ~(term | trunc)), None

    init = (obs, state, key, jax.numpy.zeros(episodes), jax.numpy.ones(episodes, bool))
    carry, _ = jax.jit(lambda c: jax.lax.scan(body, c, None, params.max_steps_in_episode))(init)
    return [float(x) for x in carry[3]]


def pqn(a) -> list[dict]:
    checkout("PUREJAXQL", "mttga/purejaxql", "purejaxql/pqn_minatar.py")
    hydra, omegaconf, _ = stand_ins("hydra", "omegaconf", "wandb")
    hydra.main = lambda **kw: lambda fn: fn
    omegaconf.OmegaConf = None
    import gymnax
    import jax
    import numpy as np
    import pqn_minatar  # the checkout's file

    log = pqn_minatar.LogWrapper
    pqn_minatar.LogWrapper = lambda env: FiveTuple(log(env))
    game = a.env.removeprefix("MinAtar/").removesuffix("-v1")  # MinAtar/Breakout-v1: Breakout
    per = PQN_MINATAR["NUM_ENVS"] * PQN_MINATAR["NUM_STEPS"]
    config = dict(PQN_MINATAR, ENV_NAME=f"{game}-MinAtar", TOTAL_TIMESTEPS=a.total_steps,
                  TOTAL_TIMESTEPS_DECAY=a.total_steps)  # fmt: skip
    out, compile_seconds, seconds = compiled(pqn_minatar.make_train, config, a.seed)
    m = jax.tree_util.tree_map(np.asarray, out["metrics"])  # [updates]
    updates = len(m["update_steps"])
    rows = []
    for u in range(updates):
        row = dict(step=(u + 1) * per, seconds=round(seconds * (u + 1) / updates, 4))
        if m["returned_episode_valid"][u] > 0:  # (the file's mean over steps and envs)
            row["return"] = float(m["returned_episode_returns"][u])
        rows.append(row)
    ts = out["runner_state"][0]
    env, params = gymnax.make(config["ENV_NAME"])
    network = pqn_minatar.QNetwork(env.action_space(params).n, norm_type=config["NORM_TYPE"])
    variables = {"params": ts.params, "batch_stats": ts.batch_stats}
    r = greedy_minatar(network, variables, game, a.eval_episodes, a.seed + 10_000)
    rows[-1].update(eval_return=float(np.mean(r)), eval_return_std=float(np.std(r)),
                    compile_seconds=round(compile_seconds, 3), jax=jax.__version__,
                    process_seconds=round(time.perf_counter() - START, 3))  # fmt: skip
    return rows


def main() -> None:
    if sys.argv[1:2] == ["step"]:  # MinAtar stepping (bench/micro/minatar_speed.py --jax)
        q = argparse.ArgumentParser(description=stepping.__doc__)
        q.add_argument("step")
        q.add_argument("--game", required=True)
        q.add_argument("--num-envs", type=int, required=True)
        q.add_argument("--seconds", type=float, default=3.0)
        b = q.parse_args()
        import jax

        sps = stepping(b.game, b.num_envs, b.seconds)
        print(json.dumps(dict(game=b.game, num_envs=b.num_envs, sps=sps, jax=jax.__version__)))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("algo", choices=("ppo", "pqn"))
    for name, kind in (("env", str), ("seed", int), ("total_steps", int), ("eval_every", int),
                       ("eval_episodes", int), ("out_dir", str)):  # fmt: skip
        p.add_argument("--" + name.replace("_", "-"), type=kind, required=True)
    a = p.parse_args()
    rows = {"ppo": ppo, "pqn": pqn}[a.algo](a)
    name = {"ppo": "purejaxrl_ppo", "pqn": "purejaxql_pqn"}[a.algo]
    key = a.env.replace("/", "-")
    out_dir = Path(a.out_dir) / f"{key}__{name}__s{a.seed}__{time.strftime('%H%M%S')}"
    out_dir.mkdir(parents=True)
    (out_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))


if __name__ == "__main__":
    main()
