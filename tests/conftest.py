"""Shared test set-up: repo root on sys.path, one torch thread per process (CI has 2 cores), the
helpers and run settings that several test modules use (no test module imports another), and
session-scoped trained agents that several tests reuse (training runs once per session).

Tests that train to a threshold, run torchrun, a population or SIGKILL/resume subprocesses carry the
`slow` marker (pytest.ini): `pytest -m "not slow"` is the development loop, plain `pytest` runs
all."""

import os
import pathlib
import shutil
import socket
import sys
from dataclasses import replace

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # bench/report.py's stable solve: assert_solved_and_stays
os.environ.setdefault("WANDB_MODE", "disabled")
# one thread in every subprocess a test starts too (the algorithm files' command lines, torchrun):
# on 2 cores a subprocess with torch's default 2 threads beside the other xdist worker ran ~7x
# slower than alone (160 s vs 23 s)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _subnormals_as_a_fresh_process_has_them():
    """A run flushes subnormal floats to zero for its whole process (common.device.flush_denormals);
    each test starts from the CPU's default, as a fresh process does (hypothesis refuses to draw
    floats with subnormals flushed)."""
    yield
    torch.set_flush_denormal(False)


def assert_same(a, b, where: str = "checkpoint") -> None:
    """Bit-exact equality of nested checkpoint contents (dicts, lists, tuples, tensors, numbers; NaN
    equals NaN, e.g. an episode statistic before any episode finished)."""
    if torch.is_tensor(a):
        assert torch.is_tensor(b), f"{where}: {b!r} is no tensor"
        torch.testing.assert_close(
            b.to(a.device), a, rtol=0, atol=0, equal_nan=True, msg=f"{where} differs"
        )
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: keys differ"
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} != {b!r}"


def assert_user_error(exc: BaseException, capfd) -> str:
    """What a process would print for the uncaught `exc` (common.cli.user_error_hook, the hook every
    entry point installs): exit status 2 and one line, `error: ...`, without a traceback. Returns
    the line."""
    from common.cli import user_error_hook

    capfd.readouterr()
    # a bug's traceback goes to Python's hook and raises nothing
    with pytest.raises(SystemExit) as e:
        user_error_hook(type(exc), exc, exc.__traceback__)
    err = capfd.readouterr().err
    assert e.value.code == 2, e.value.code
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def prose_lines(path: pathlib.Path):
    """(line number, text) of every comment and docstring line of a Python file (what
    test_lineage.py reads for measurements and test_links.py for links)."""
    import io
    import tokenize

    src = path.read_text(encoding="utf-8")
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    lines = src.splitlines()
    yield from ((i, lines[i - 1]) for i in sorted(docstring_lines(src)))


def docstring_lines(src: str) -> set[int]:
    """The line numbers of every docstring (module, class, function, field) of Python source."""
    import ast

    out: set[int] = set()
    for node in ast.walk(ast.parse(src)):
        body = getattr(node, "body", None)
        for stmt in body if isinstance(body, list) else []:
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                out.update(range(stmt.lineno, stmt.end_lineno + 1))
    return out


def free_port() -> int:
    """A free TCP port on the loopback interface (for torchrun's rendezvous and gloo)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Several command lines run as __main__ (runpy) in one interpreter: one torch import (~3 s on a slow
# host) instead of one a command line. Each: ["path", "algos/x.py", argv] (`python algos/x.py ...`)
# or ["module", "tools.export", argv] (`python -m tools.export ...`); the result is what the
# process would have printed and its exit status: an uncaught exception goes through sys.excepthook
# (the entry points' `user_error_hook` prints its one line and exits 2).
_RUN_AS_MAIN = """
import contextlib, io, json, runpy, sys
out, real_stderr = [], sys.__stderr__
for kind, target, argv in json.loads(sys.argv[1]):
    sys.argv, so, se = [target, *argv], io.StringIO(), io.StringIO()
    sys.__stderr__ = se  # user_error_hook prints to the process's own stderr
    with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
        try:
            try:
                if kind == "path":
                    runpy.run_path(target, run_name="__main__")
                else:
                    runpy.run_module(target, run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit:
                raise
            except BaseException:
                sys.excepthook(*sys.exc_info())
                code = 1
        except SystemExit as e:  # as the interpreter does: None is 0, an int itself, \
anything else printed and 1
            code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=se)
    sys.__stderr__ = real_stderr
    out.append([code, so.getvalue(), se.getvalue()])
print(json.dumps(out))
"""


def evaluations(result: dict) -> list[tuple[int, float]]:
    """(env step, evaluation return) of every evaluation a run logged (metrics.jsonl)."""
    import json

    rows = map(json.loads, open(pathlib.Path(result["run_dir"]) / "metrics.jsonl"))
    return [(r["step"], r["eval_return"]) for r in rows if "eval_return" in r]


def assert_solved_and_stays(result: dict, threshold: float, by: int | None = None) -> None:
    """The stable solve bench/report.py reports (`report.stable_at`), by env step `by` if given:
    from some evaluation on, every one to the end of the run, the final policy's included, is at or
    above `threshold`. A dip before that point is allowed, so long as the run is solved for good by
    `by`: a test that failed on the first dip after the first hit passed or failed by the host's
    numeric path (bench/NOTES.md#one-seed-one-run-on-every-host)."""
    import report  # bench/report.py (on sys.path: see the top of this file)

    evals = evaluations(result)
    assert evals[-1][0] == result["steps"], f"no evaluation of the final policy: {evals}"
    stable = report.stable_at([(step, 0.0, ret) for step, ret in evals], threshold)
    # (stable is None: the final evaluation is below the threshold)
    assert stable and result["eval_return"] >= threshold, f"final below {threshold}: {evals}"
    assert by is None or stable[0] <= by, f"solved for good only from {stable[0]} (> {by}): {evals}"


def run_as_main(*commands, env: dict | None = None) -> list:
    """`subprocess.run` of each command (a list as `_RUN_AS_MAIN` describes) in one Python process;
    returns one `SimpleNamespace(returncode, stdout, stderr)` per command."""
    import json
    import subprocess
    from types import SimpleNamespace

    out = subprocess.run(
        [sys.executable, "-c", _RUN_AS_MAIN, json.dumps([list(c) for c in commands])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=None if env is None else dict(os.environ, **env),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [
        SimpleNamespace(returncode=c, stdout=o, stderr=e)
        for c, o, e in json.loads(out.stdout.splitlines()[-1])
    ]


@pytest.fixture(scope="session")
def cli_help():
    """name -> (exit code, stdout) of `python algos/<name>.py --help`, for every algorithm file."""
    names = sorted(p.stem for p in (ROOT / "algos").glob("*.py") if p.stem != "__init__")
    runs = run_as_main(*[("path", f"algos/{n}.py", ["--help"]) for n in names])
    return {
        n: [r.returncode, r.stdout if r.returncode in (0, None) else r.stdout + r.stderr]
        for n, r in zip(names, runs)
    }


def checkpoint_params(ckpt_path) -> dict:
    """The network parameters in a checkpoint file: its "model", or its "actor" and "critic"
    (prefixed)."""
    ck = torch.load(ckpt_path, weights_only=False)
    return (
        ck["model"]
        if "model" in ck
        else {
            **{f"actor.{k}": v for k, v in ck["actor"].items()},
            **{f"critic.{k}": v for k, v in ck["critic"].items()},
        }
    )


def run_with_snapshots(module, args, monkeypatch):
    """Run `module.main(args)`, keeping a copy of every checkpoint it writes (they overwrite each
    other). Returns (main's result, the copies' paths in writing order)."""
    import common.run

    snapshots = []
    # the run shell writes a migrated file's checkpoints
    owner = common.run if hasattr(module, "Run") else module
    original = owner.save_checkpoint

    def keep(path, payload):
        out = original(path, payload)
        snap = path.parent / f"snap{len(snapshots)}.pt"
        shutil.copy(path, snap)
        snapshots.append(snap)
        return out

    monkeypatch.setattr(owner, "save_checkpoint", keep)
    result = module.main(args)
    monkeypatch.setattr(owner, "save_checkpoint", original)
    return result, snapshots


# ---- short runs (a few hundred env steps, CPU, a checkpoint before the end) ----------------------
# Shared by the determinism / resume tests (test_resume.py, the multi-agent modules) and the fault
# suite (test_faults.py, which runs every algorithm file with these settings).
# (2 gradient steps per vector step, not the defaults' 8: the same code paths at a quarter of the
# updates; a d3qn run with PER took 4.5 s with 8 on this machine)
_SMALL_DQN = dict(
    env="CartPole-v1",
    num_envs=4,
    total_steps=4 * 150,
    learning_starts=100,
    batch_size=32,
    gradient_steps=2,
    eval_every=0,
    save_every=4 * 50,
    eval_episodes=2,
    quiet=True,
)
# (the actor-critics: 1 gradient step per vector step, not the defaults' 4, likewise)
_SMALL_AC = dict(
    env="Pendulum-v1",
    num_envs=2,
    total_steps=2 * 120,
    learning_starts=60,
    batch_size=32,
    gradient_steps=1,
    hidden=(32, 32),
    eval_every=0,
    save_every=2 * 40,
    eval_episodes=2,
    quiet=True,
)
# H-term actor-critics: Pendulum episodes last 200 steps, so learning (and the H step, every
# iteration) starts when the first 4 have ended; checkpoints before (in-progress trajectories in the
# store) and after
_SMALL_AC_H = {
    **_SMALL_AC,
    "num_envs": 4,
    "total_steps": 4 * 250,
    "learning_starts": 4 * 200,
    "save_every": 4 * 100,
    "h_term_update_gap": 1,
    "h_term_batch": 16,
}
# file (algos/<name>.py) -> tiny CPU Args settings with a checkpoint before the end, for the fault,
# resume and export tests; a file not named here takes its parent's (`small_settings`)
_OWN_SMALL = {
    "ppo_vec": dict(
        env="CartPole-v1",
        num_envs=16,
        num_steps=16,
        num_minibatches=4,
        total_steps=16 * 16 * 6,
        eval_every=0,
        save_every=16 * 16 * 2,
        eval_episodes=2,
        quiet=True,
    ),
    "a2c": dict(
        env="Pendulum-v1",
        num_envs=8,
        num_steps=5,
        total_steps=8 * 5 * 6,
        eval_every=0,
        save_every=8 * 5 * 2,
        eval_episodes=2,
        quiet=True,
        norm_obs=True,
    ),
    "dqn": _SMALL_DQN,
    "double_dqn": _SMALL_DQN,
    "d3qn": {**_SMALL_DQN, "per": True},
    "pqn": dict(
        env="CartPole-v1",
        num_envs=8,
        num_steps=16,
        num_minibatches=2,
        total_steps=8 * 16 * 6,
        eval_every=0,
        save_every=8 * 16 * 2,
        eval_episodes=2,
        quiet=True,
        hidden=(32, 32),
    ),
    "ddpg": _SMALL_AC,
    "td3": {**_SMALL_AC, "per": True},
    "sac": _SMALL_AC,
    "modsac": {**_SMALL_AC, "mod_period": 8},
    "redq": {**_SMALL_AC, "utd": 2},
    # the n-step window travels in the checkpoint
    "fast_td3": {**_SMALL_AC, "per": True, "n_step": 3},
    # H-term variants: long enough for finished episodes, so the store matters on resume
    "ppo_h": dict(
        env="CartPole-v1",
        num_envs=16,
        num_steps=16,
        num_minibatches=4,
        total_steps=16 * 16 * 6,
        eval_every=0,
        save_every=16 * 16 * 2,
        eval_episodes=2,
        quiet=True,
        h_term_batch=16,
    ),
    "ddpg_h": {**_SMALL_AC_H},
    "td3_h": {**_SMALL_AC_H},
    "sac_h": {**_SMALL_AC_H},
    # Podracer files in one process: the pipeline on (segments of 8 vectorized steps), so its
    # explorer state (actor copy, generator, updates owed) must survive a resume; torchrun is
    # tests/test_distributed*.py's
    "ppo_podracer": dict(
        env="CartPole-v1",
        num_envs=16,
        num_steps=16,
        num_minibatches=4,
        total_steps=16 * 16 * 6,
        eval_every=0,
        save_every=16 * 16 * 2,
        eval_episodes=2,
        quiet=True,
    ),
    # the GRU state travels in the checkpoint; CartPole's short early episodes exercise the resets
    # mid-sequence
    "ppo_rnn": dict(
        env="CartPole-v1",
        num_envs=16,
        num_steps=16,
        num_minibatches=4,
        total_steps=16 * 16 * 6,
        eval_every=0,
        save_every=16 * 16 * 2,
        eval_episodes=2,
        quiet=True,
        rnn_hidden=16,
    ),
    "td3_podracer": {**_SMALL_AC, "per": True, "pipeline": True, "pipeline_segment": 8},
    "sac_podracer": {**_SMALL_AC, "pipeline": True, "pipeline_segment": 8},
}
# ppo_vec with observation and reward normalization (their statistics travel in the checkpoint)
SMALL_PPO_PENDULUM_NORMALIZED = dict(
    env="Pendulum-v1",
    num_envs=8,
    num_steps=8,
    num_minibatches=2,
    total_steps=8 * 8 * 6,
    eval_every=0,
    save_every=8 * 8 * 2,
    eval_episodes=2,
    quiet=True,
    norm_obs=True,
    norm_reward=True,
)
# batched MuJoCo (CPU batch backend): the simulator state travels in the checkpoint too
SMALL_PPO_HOPPER = dict(
    SMALL_PPO_PENDULUM_NORMALIZED, env="Hopper-v5", mujoco_backend="batch", hidden=(32, 32)
)
SMALL_SAC_HOPPER = dict(_SMALL_AC, env="Hopper-v5", mujoco_backend="batch")
# multi-agent files
MADDPG_TINY = dict(
    env="simple_spread",
    device="cpu",
    num_envs=4,
    total_steps=4 * 90,
    learning_starts=100,
    batch_size=32,
    hidden=(16, 16),
    eval_every=0,
    save_every=4 * 30,
    eval_episodes=2,
    quiet=True,
)
MAPPO_TINY = dict(
    env="simple_spread",
    num_envs=8,
    num_steps=5,
    num_minibatches=2,
    update_epochs=2,
    hidden=(16, 16),
    total_steps=8 * 5 * 6,
    eval_every=0,
    save_every=8 * 5 * 2,
    eval_episodes=2,
    quiet=True,
)
VD_TINY = dict(
    env="simple_spread",
    num_envs=4,
    total_steps=4 * 150,
    learning_starts=100,
    batch_size=32,
    hidden=(32, 32),
    eval_every=0,
    save_every=4 * 50,
    eval_episodes=2,
    quiet=True,
    device="cpu",
)
_OWN_SMALL.update(
    # the Beta policy (continuous actions; its parent's settings would run its categoricals)
    ppo_beta=SMALL_PPO_PENDULUM_NORMALIZED,
    maddpg=MADDPG_TINY,
    # pink exploration noise: its block and position travel in the checkpoint (maddpg runs white)
    matd3=dict(MADDPG_TINY, noise_color=1.0),
    mappo=MAPPO_TINY,
    qmix=VD_TINY,
    vdn=VD_TINY,
)

# the one family list; every algorithm file declares its own (`PARENT, FAMILY = ...`)
FAMILIES = ("PPO", "DQN", "DDPG/TD3/SAC", "multi-agent")
ALGO_FILES = sorted(p.stem for p in (ROOT / "algos").glob("*.py") if p.stem != "__init__")


def declaration(name: str, algos: pathlib.Path = ROOT / "algos") -> tuple[str | None, str] | None:
    """`(PARENT, FAMILY)` as algos/<name>.py declares them (read, not imported), or None."""
    import ast

    for node in ast.parse((algos / f"{name}.py").read_text()).body:
        targets = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(targets, ast.Tuple) and [getattr(t, "id", "") for t in targets.elts] == [
            "PARENT",
            "FAMILY",
        ]:
            parent, family = ast.literal_eval(node.value)
            return parent, family
    return None


def small_settings(name: str, algos: pathlib.Path = ROOT / "algos") -> dict | None:
    """The file's tiny settings: its own, else its parent's (a copied file runs as its parent's
    tests run it), else None (no declaration to follow)."""
    seen = set()
    while name not in _OWN_SMALL:
        found = declaration(name, algos) if (algos / f"{name}.py").is_file() else None
        if found is None or found[0] is None or name in seen:
            return None
        seen.add(name)
        name = found[0]
    return _OWN_SMALL[name]


MULTI_AGENT = {n for n in ALGO_FILES if (declaration(n) or (None, ""))[1] == "multi-agent"}
# every algorithm file's small settings; SMALL_RUNS: the single-agent ones
ALL_SMALL_RUNS = {n: c for n in ALGO_FILES if (c := small_settings(n)) is not None}
SMALL_RUNS = {n: c for n, c in ALL_SMALL_RUNS.items() if n not in MULTI_AGENT}

# the small settings run without curves.png (`--no-plots`): drawing it was a third of such a run's
# time, and the fault, resume and export tests run them hundreds of times (tests/test_run.py checks
# the plot)
for _cfg in (
    _SMALL_DQN,
    _SMALL_AC,
    _SMALL_AC_H,
    *_OWN_SMALL.values(),
    SMALL_PPO_PENDULUM_NORMALIZED,
    SMALL_PPO_HOPPER,
    SMALL_SAC_HOPPER,
    MADDPG_TINY,
    MAPPO_TINY,
    VD_TINY,
):
    _cfg["plots"] = False


# The learning budgets of the tests (fixed seeds). Kept here so one place shows what CI trains.
# ppo_h on CartPole-v1 with its dataclass defaults (1024 envs x 16 steps), 400k steps
PPO_CARTPOLE = dict(
    env="CartPole-v1", seed=1, total_steps=400_000, eval_every=0, save_every=0, quiet=True
)
# ppo_vec as `--env CartPole-v1` runs it (its row, 300k steps), evaluated every 10k: the learning
# test asserts the stable solve (every evaluation from some point on, the final one included)
PPO_CARTPOLE_ROW = dict(env="CartPole-v1", seed=1, eval_every=10_000, save_every=0, quiet=True)
# PPO on Pendulum-v1: ppo_vec's (and ppo_h's) Pendulum-v1 row, written out (the adapter test passes
# it as flags to a factory env id, which has no row); 5 epochs (was 10: the row's sweep,
# bench/results/sweeps/ppo_vec_Pendulum-v1_row.md)
PPO_PENDULUM = dict(
    env="Pendulum-v1",
    seed=1,
    num_envs=64,
    num_steps=64,
    num_minibatches=32,
    update_epochs=5,
    learning_rate=1e-3,
    gamma=0.9,
    norm_reward=True,
    total_steps=100_000,
    eval_every=0,
    save_every=0,
    quiet=True,
)
# DQN with the file's CartPole-v1 defaults (`dqn.default_args`), their whole 100k-step budget (the
# learning rate anneals to it), evaluated every 5k
DQN_CARTPOLE = dict(
    env="CartPole-v1", seed=1, total_steps=100_000, eval_every=5_000, save_every=0, quiet=True
)
# the off-policy learning tests' Pendulum-v1 setting (test_learning_offpolicy.py, the H-term
# variants, the pipeline): each file's own Pendulum-v1 row (`pendulum_row`: its TASK_DEFAULTS, what
# `--env Pendulum-v1` gives a user: 64x64 nets, learning from 1k steps, fast targets) for 8k of the
# row's 20k steps. Every row's held-out seeds evaluate >= -200 by 2k-5k steps (bench/README's sweeps
# table); on seed 1 each file here evaluated -139 to -142 at 4k, 6k and 8k steps (10-18 s each
# alone; the 128x128 setting these tests ran before took 23-55 s in the suite)
OFFPOLICY_PENDULUM = dict(
    env="Pendulum-v1", seed=1, eval_every=0, save_every=0, quiet=True, total_steps=8_000
)


def pendulum_row(algo: str, **kw) -> dict:
    """`algo`'s Pendulum-v1 row with the learning tests' run settings (OFFPOLICY_PENDULUM) and `kw`
    over it."""
    import importlib

    return {
        **importlib.import_module(f"algos.{algo}").TASK_DEFAULTS["Pendulum-v1"],
        **OFFPOLICY_PENDULUM,
        **kw,
    }


@pytest.fixture(scope="session")
def ppo_cartpole(tmp_path_factory):
    from algos import ppo_vec

    out_dir = str(tmp_path_factory.mktemp("ppo_cartpole"))
    return ppo_vec.main(
        replace(ppo_vec.default_args("CartPole-v1"), out_dir=out_dir, **PPO_CARTPOLE_ROW)
    )


@pytest.fixture(scope="session")
def ppo_pendulum(tmp_path_factory):
    from algos import ppo_vec

    return ppo_vec.main(
        ppo_vec.Args(out_dir=str(tmp_path_factory.mktemp("ppo_pendulum")), **PPO_PENDULUM)
    )


@pytest.fixture(scope="session")
def dqn_cartpole(tmp_path_factory):
    from algos import dqn

    args = replace(
        dqn.default_args("CartPole-v1"),
        out_dir=str(tmp_path_factory.mktemp("dqn_cartpole")),
        **DQN_CARTPOLE,
    )
    return dqn.main(args)


def pytest_collection_modifyitems(config, items):
    """Slow tests first: pytest-xdist hands tests out in collection order, so the long ones start
    early and the short ones fill the gaps at the end instead of one worker finishing a long test
    alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# bench/gpu_lease.sh: a failure's traceback at once, not at the end
if os.environ.get("PYTEST_INSTAFAIL"):
    # (a CUDA abort later in the run would take the end report with it)
    def pytest_runtest_logreport(report):
        if report.failed:
            print(
                f"\n---- {report.nodeid} ({report.when}) ----\n{report.longreprtext}\n", flush=True
            )
