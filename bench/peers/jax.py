"""The JAX stack beside us: PureJaxRL's PPO (luchris429/purejaxrl, `purejaxrl/ppo.py`, its whole
training loop one XLA program) run from a checkout of its repository, unchanged, in its own venv
(bench/.venv-jax, `VENVS`), writing our metrics schema. Nothing of ours is imported here. Two
shims, outside its files: gymnax 1.0's step returns terminated and truncated apart (`FiveTuple`
joins them into the `done` the file expects), and brax and navix, which its wrappers.py imports for
wrappers a gymnax task never uses, are empty stand-ins.

    PUREJAXRL=/path/to/purejaxrl bench/.venv-jax/bin/python bench/peers/jax.py ppo \\
        --env CartPole-v1 --seed 1 --total-steps 500000 --eval-every 25000 --eval-episodes 10 \\
        --out-dir runs

The settings are the file's own (its `__main__` config, restated below: the file keeps them under
`if __name__ == "__main__"`), with the row's env steps and seed. Timing: `compile_seconds` is
jit's trace and compile (`lower(...).compile()`), `seconds` the compiled loop's run alone, and
`process_seconds` the whole process from its start. The loop has no evaluations inside (one XLA
program): a row per update carries the training episodes' mean return (`return`, the file's own
log), its seconds a share of the loop's time in proportion to its updates (every update is the same
program); the final policy (greedy) is then evaluated as ours are: `--eval-episodes` on
gymnasium's env seeded seed + 10000 (`eval_return`), and 10 from 20000 (`gym_return`).
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


class FiveTuple:
    """The step-API shim: gymnax 1.0 returns (obs, state, reward, terminated, truncated, info) where
    the file expects the older (obs, state, reward, done, info); done = either, as it was."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
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
    p.add_argument("algo", choices=("ppo",))
    for name, kind in (("env", str), ("seed", int), ("total_steps", int), ("eval_every", int),
                       ("eval_episodes", int), ("out_dir", str)):  # fmt: skip
        p.add_argument("--" + name.replace("_", "-"), type=kind, required=True)
    a = p.parse_args()
    repo = os.environ.get("PUREJAXRL", "")
    if not (Path(repo) / "purejaxrl" / "ppo.py").is_file():
        raise SystemExit("error: set PUREJAXRL to a checkout of luchris429/purejaxrl (its "
                         "purejaxrl/ppo.py is run as it is)")  # fmt: skip
    sys.path.insert(0, str(Path(repo) / "purejaxrl"))
    # wrappers.py imports brax and navix for its Brax and Navix wrappers, which a gymnax task never
    # uses: empty stand-ins, not the packages (brax would pull in MuJoCo and pin another jax)
    import types

    for name in ("brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training", "navix"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["brax"].envs = sys.modules["brax.envs"]
    training = sys.modules["brax.envs.wrappers.training"]
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
    rng = jax.random.PRNGKey(a.seed)
    t0 = time.perf_counter()
    train = jax.jit(make_train(config)).lower(rng).compile()
    compile_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(train(rng))
    seconds = time.perf_counter() - t0
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
    out_dir = Path(a.out_dir) / f"{a.env}__purejaxrl_ppo__s{a.seed}__{time.strftime('%H%M%S')}"
    out_dir.mkdir(parents=True)
    (out_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))


if __name__ == "__main__":
    main()
