"""Faults, across every algorithm file (issue 10): NaN/Inf injected into observations, rewards and
parameters is caught within one update, named, and the last good checkpoint survives; a run killed
with SIGKILL at an arbitrary moment resumes to the same parameters and evaluation metrics as the
uninterrupted run; a SIGKILL during a checkpoint write never leaves an unreadable checkpoint.

The SIGKILL test is the suite's exact-resume test (no other module repeats it): every algorithm
file, plus the settings in `RESUME_EXTRA` (normalizers, batched MuJoCo, per-agent MAPPO actors). It
and the checkpoint-write test are marked `slow` (subprocesses killed at random moments).

Every file in `algos/` runs here with its tiny CPU setting (`conftest.small_settings`: its own, or a
copied file's parent's).
"""

from __future__ import annotations

import importlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import envs
from conftest import (
    ALL_SMALL_RUNS,
    MAPPO_TINY,
    ROOT,
    SMALL_PPO_HOPPER,
    SMALL_PPO_PENDULUM_NORMALIZED,
    SMALL_RUNS,
    SMALL_SAC_HOPPER,
    assert_same,
    assert_user_error,
    declaration,
)

CONFIGS = dict(ALL_SMALL_RUNS)
ALGOS = sorted(CONFIGS)
# settings beyond CONFIGS whose state must survive a resume too (the SIGKILL test): case -> (file,
# settings)
RESUME_EXTRA = {
    # obs/reward normalizer statistics
    "ppo_vec-pendulum-normalized": ("ppo_vec", SMALL_PPO_PENDULUM_NORMALIZED),
    "ppo_vec-hopper": ("ppo_vec", SMALL_PPO_HOPPER),  # batched MuJoCo simulator state
    "sac-hopper": ("sac", SMALL_SAC_HOPPER),
    "mappo-per-agent-actors": ("mappo", dict(MAPPO_TINY, share_actor=False)),
    # the colored noise block and its position
    "td3-pink-noise": ("td3", dict(SMALL_RUNS["td3"], noise_color=1.0)),
    "sac-pink-noise": ("sac", dict(SMALL_RUNS["sac"], noise_color=1.0)),
}
RESUME_CASES = {**{a: (a, CONFIGS[a]) for a in ALGOS}, **RESUME_EXTRA}


def _module(name: str):
    return importlib.import_module(f"algos.{name}")


def test_every_algorithm_file_is_covered():
    files = sorted(p.stem for p in (ROOT / "algos").glob("*.py") if p.stem != "__init__")
    missing = sorted(set(files) - set(ALGOS))
    assert not missing, (
        f"algorithm files with no tiny test settings: {missing}; declare its parent and family "
        '(`PARENT, FAMILY = "td3", "DDPG/TD3/SAC"` under ALGO) and it runs with its parent\'s'
    )


# ---- numerical guard -----------------------------------------------------------------------------
def _wrap_training_env(monkeypatch, num_envs: int, wrap) -> None:
    """The next training env `envs.make` builds (num_envs sub-envs) steps through
    `wrap(its step)`."""
    make = envs.make

    def wrapping_make(*a, **kw):
        env = make(*a, **kw)
        n = kw.get("num_envs", a[1] if len(a) > 1 else None)  # by keyword or positional
        if n != num_envs or hasattr(env, "_wrapped_by_test"):
            return env
        env.step, env._wrapped_by_test = wrap(env.step), True
        return env

    monkeypatch.setattr(envs, "make", wrapping_make)


def _poison_env(monkeypatch, what: str, at_call: int, num_envs: int) -> None:
    """The next training env `envs.make` builds (num_envs sub-envs) returns a NaN in its
    observations or rewards from its `at_call`-th step on."""
    calls = [0]

    def poisoned(step):
        def bad_step(actions):
            out = list(step(actions))
            calls[0] += 1
            if calls[0] >= at_call:
                i = 0 if what == "observations" else 1
                out[i] = out[i].clone()
                out[i][(0,) * out[i].dim()] = float("nan")
            return tuple(out)

        return bad_step

    _wrap_training_env(monkeypatch, num_envs, poisoned)


def _poison_params(monkeypatch, after_env_calls: int, num_envs: int) -> None:
    """The first optimizer step (over every Adam) after the training env's `after_env_calls`-th step
    leaves a NaN in its first parameter. The files' Adam is `torch.optim.Adam`."""
    step, env_calls, done = torch.optim.Adam.step, [0], [False]

    def counting(env_step):
        def counted(actions):
            env_calls[0] += 1
            return env_step(actions)

        return counted

    def bad_step(self, *a, **kw):
        out = step(self, *a, **kw)
        if env_calls[0] >= after_env_calls and not done[0]:
            done[0] = True
            with torch.no_grad():
                self.param_groups[0]["params"][0].view(-1)[0] = float("nan")
        return out

    _wrap_training_env(monkeypatch, num_envs, counting)
    monkeypatch.setattr(torch.optim.Adam, "step", bad_step)


def _all_finite(obj) -> bool:
    if torch.is_tensor(obj):
        return not obj.is_floating_point() or bool(torch.isfinite(obj).all())
    if isinstance(obj, dict):
        return all(_all_finite(v) for k, v in obj.items() if k not in ("rng", "explore_rng"))
    if isinstance(obj, (list, tuple)):
        return all(_all_finite(v) for v in obj)
    return True


NAN_CASES = [(a, w) for a in ALGOS for w in ("observations", "rewards", "parameters")]


@pytest.mark.parametrize("algo,what", NAN_CASES, ids=[f"{a}-{w}" for a, w in NAN_CASES])
def test_nan_is_caught_named_and_last_checkpoint_kept(algo, what, tmp_path, monkeypatch):
    module, kw = _module(algo), dict(CONFIGS[algo], out_dir=str(tmp_path), eval_every=0)
    calls = kw["total_steps"] // kw["num_envs"]  # env.step calls of the whole run
    if what == "parameters":  # the first optimizer step 70% of the way through the run breaks
        _poison_params(monkeypatch, after_env_calls=int(0.7 * calls), num_envs=kw["num_envs"])
    else:
        _poison_env(monkeypatch, what, at_call=int(0.7 * calls), num_envs=kw["num_envs"])
    # parameters: the guard names them, or (when the NaN went into a critic that the same update's
    # next loss reads before the parameters are checked) that loss: either way within the update
    expected = "in the (parameters|[a-zA-Z -]*loss) " if what == "parameters" else f"in the {what} "
    with pytest.raises(FloatingPointError, match=expected) as err:
        module.main(module.Args(**kw))
    run_dirs = list(tmp_path.iterdir())
    assert len(run_dirs) == 1
    ckpt = run_dirs[0] / "checkpoint.pt"
    assert ckpt.is_file(), f"{algo}: the setting should write a checkpoint before the fault"
    saved = torch.load(ckpt, weights_only=False)
    assert saved["global_step"] < kw["total_steps"]
    assert _all_finite(saved), "a checkpoint holds a non-finite value"
    assert str(ckpt) in str(err.value) and "--resume" in str(err.value)


@pytest.mark.parametrize("algo", ["ppo_vec", "sac", "td3"])
def test_overflowing_loss_is_named(algo, tmp_path, monkeypatch):
    """A finite but huge reward (1e30) makes the squared TD/value error overflow: the loss is
    named."""
    module, kw = _module(algo), dict(CONFIGS[algo], out_dir=str(tmp_path), eval_every=0)
    make = envs.make

    def huge_make(*a, **k):
        env = make(*a, **k)
        if k.get("num_envs", a[1] if len(a) > 1 else None) == kw["num_envs"]:
            step = env.step

            def huge(actions):
                obs, r, *rest = step(actions)
                return (obs, r * 0 + 1e30, *rest)

            env.step = huge
        return env

    monkeypatch.setattr(envs, "make", huge_make)
    with pytest.raises(FloatingPointError, match=r"in the [a-zA-Z ]*loss "):
        module.main(module.Args(**kw))


def test_deferred_guard_names_the_first_bad_quantity():
    """The accelerator half of `NumericGuard` (an on-device flag, one check over the watched
    tensors' concatenation), run here on CPU tensors by calling the guard's device an accelerator: a
    NaN in the middle of many tensors is found, the first bad name is kept, clean watches pass, and
    mixed dtypes are fine. (tests/test_cuda.py checks it on a GPU, inside the training loops.)"""
    from common.guard import NumericGuard

    guard = NumericGuard("cpu")
    # not "cpu": the deferred branch (its tensors stay where they are)
    guard.device = torch.device("meta")
    params = [
        torch.randn(7, 5),
        torch.randn(5),
        torch.randn(3, 3, dtype=torch.float64),
        torch.randn(2),
    ] * 4
    guard.watch("observations", torch.randn(4, 3), {"a": torch.randn(4, 2), "b": torch.arange(3)})
    guard.watch("parameters", *params)
    # finite, though their sum overflows
    guard.watch("rewards", torch.full((10,), 3e38), torch.full((3,), -3e38))
    guard.check(10, sync=True)  # all finite: nothing raised
    params[9][1] = float("inf")
    guard.watch("parameters", *params)
    # later and also bad: the first bad one is named
    guard.watch("PPO loss", torch.tensor(float("nan")))
    with pytest.raises(FloatingPointError, match=r"in the parameters between env steps 10 and 20"):
        guard.check(20, sync=True)


# ---- SIGKILL at an arbitrary moment, then --resume -----------------------------------------------
# The killed run is a subprocess whose training env's steps are slowed by a sleep (results do not
# depend on it), so that it lasts >= 1.2 s and the kill, drawn uniformly after its first checkpoint,
# lands anywhere in the loop: mid-rollout, mid-update, mid-evaluation or mid-checkpoint-write. Only
# the first env the run makes (its training env) is slowed: slowed evaluation envs made the
# evaluations most of the run (and an untrained policy's 1000-step Hopper episodes took ~40 s).
_KILLED_RUN = """
import json, sys, time
sys.path.insert(0, '.')
import torch
torch.set_num_threads(1)
import envs
from algos import {algo} as m
kw, pause = json.loads(sys.argv[1]), float(sys.argv[2])
make, made = envs.make, []
def slow_make(*a, **k):
    env = make(*a, **k)
    made.append(env)
    if len(made) > 1:
        return env
    step = env.step
    def slow(actions):
        time.sleep(pause)
        return step(actions)
    env.step = slow
    return env
envs.make = slow_make
m.main(m.Args(**kw))
print("FINISHED")
"""


def _eval_rows(run_dir: Path) -> list[tuple]:
    """(step, eval metrics) of every evaluation row in metrics.jsonl: ticks decided on env steps, so
    the same in every run; the training columns of time-based ticks are means over wall-clock
    windows."""
    rows = [
        json.loads(line)
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
        if line.strip()
    ]
    return [
        (r["step"], r["eval_return"], r["eval_return_std"], r.get("eval_length"))
        for r in rows
        if "eval_return" in r
    ]


def _kill_some_time_after_first_checkpoint(
    cmd, run_parent: Path, rng: random.Random, window: float
):
    """Start `cmd`, SIGKILL it a uniform random time in [0, window) after its first checkpoint
    appears. Returns (killed?, the run directory)."""
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    deadline = time.monotonic() + 120
    ckpt = None
    while ckpt is None and proc.poll() is None and time.monotonic() < deadline:
        found = list(run_parent.glob("*/checkpoint.pt"))
        ckpt = found[0] if found else None
        time.sleep(0.005)
    time.sleep(rng.uniform(0, window))
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert killed or proc.returncode == 0, err[-2000:]
    dirs = [d for d in run_parent.iterdir() if d.is_dir()]
    return killed, (dirs[0] if dirs else None)


def _without_display_state(x):
    """A checkpoint without EpisodeStatistics' held means (`last`: the means shown at the last
    logging tick). Logging ticks are partly time-based, so which episodes the last shown mean covers
    depends on the machine's speed, not on training; everything else in the checkpoint must be
    bit-identical."""
    if isinstance(x, dict):
        return {
            k: _without_display_state(v) for k, v in x.items() if not (k == "last" and "acc" in x)
        }
    if isinstance(x, (list, tuple)):
        return type(x)(_without_display_state(v) for v in x)
    return x


@pytest.mark.slow
@pytest.mark.parametrize("case", list(RESUME_CASES))
def test_sigkill_then_resume_matches_uninterrupted_run(case, tmp_path):
    """The one exact-resume test: every algorithm file (and the settings in RESUME_EXTRA), killed at
    a random moment and resumed, ends with a checkpoint equal bit for bit (parameters, optimizers,
    buffers, normalizers, env and RNG states) and the same evaluation rows as the uninterrupted
    run. Evaluations every second checkpoint: a run resumed from a checkpoint between two
    evaluations must take their schedule up where it stood, not restart it from there."""
    algo, config = RESUME_CASES[case]
    module = _module(algo)
    kw = dict(config, eval_every=2 * config["save_every"], quiet=True)
    full = module.main(module.Args(**dict(kw, out_dir=str(tmp_path / "full"))))
    calls = kw["total_steps"] // kw["num_envs"]
    rng = random.Random(f"kill-{case}")
    # a kill that came after the last checkpoint (nothing left to resume) is drawn again
    for attempt in range(5):
        parent = tmp_path / f"killed{attempt}"
        parent.mkdir()
        cmd = [
            sys.executable,
            "-c",
            _KILLED_RUN.format(algo=algo),
            json.dumps(dict(kw, out_dir=str(parent))),
            str(1.2 / calls),
        ]
        killed, run_dir = _kill_some_time_after_first_checkpoint(
            cmd, parent, rng, window=0.7 / (attempt + 1)
        )
        ckpt = run_dir / "checkpoint.pt"
        resumed_from = torch.load(ckpt, weights_only=False)["global_step"]
        if killed and resumed_from < full["steps"]:
            break
    assert killed and resumed_from < full["steps"], (
        f"{case}: no kill landed before the run's last checkpoint"
    )
    resumed = module.main(module.Args(**dict(kw, resume=str(ckpt))))
    assert resumed["steps"] == full["steps"]
    a, b = (
        _without_display_state(torch.load(p, weights_only=False))
        for p in (full["checkpoint"], resumed["checkpoint"])
    )
    keys = [k for k in a if k not in ("seconds", "args")]
    assert keys == [k for k in b if k not in ("seconds", "args")]
    for k in keys:
        assert_same(a[k], b[k], k)
    assert _eval_rows(Path(full["run_dir"])) == _eval_rows(run_dir), (
        "evaluation metrics differ after the resume"
    )
    assert resumed["eval_return"] == full["eval_return"]
    print(
        f"{case}: killed on attempt {attempt + 1}, resumed from env step {resumed_from} of "
        f"{full['steps']}"
    )


# ---- SIGKILL during checkpoint writes ------------------------------------------------------------
_WRITER = """
import sys
sys.path.insert(0, '.')
import os, time
import torch
from common.checkpoint import save_checkpoint
fsync = os.fsync
def slow_disk_fsync(fd):  # a slow disk: most of the time is spent inside a write, \
where a kill hurts
    time.sleep(0.05)
    fsync(fd)
os.fsync = slow_disk_fsync
big = torch.arange(4_000_000, dtype=torch.float32)  # 16 MB
i = 0
while True:
    i += 1
    save_checkpoint(sys.argv[1], {"algo": "writer", "i": i, "data": big + i})
    print(i, flush=True)
"""


@pytest.mark.slow
def test_sigkill_during_checkpoint_writes_never_leaves_a_torn_checkpoint(tmp_path):
    """Kill a process that writes 16 MB checkpoints back to back (on a slow disk), at random
    moments, at least 10 times and until 3 kills have landed inside a write (how often one does
    depends on the machine's load): the checkpoint on disk always loads and is one complete write;
    a temp file left by the killed write is removed by the next one."""
    from common.checkpoint import load_checkpoint

    path, rng, mid_write, last = tmp_path / "checkpoint.pt", random.Random(10), 0, 0
    big = torch.arange(4_000_000, dtype=torch.float32)
    for kill in range(40):
        if kill >= 10 and mid_write >= 3:
            break
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, OMP_NUM_THREADS="1"),
        )
        proc.stdout.readline()  # one write completed in this process
        time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        leftovers = list(tmp_path.glob(".checkpoint.pt.*.tmp"))
        mid_write += bool(leftovers)
        ck = load_checkpoint(path)
        assert torch.equal(ck["data"], big + ck["i"]), "a torn checkpoint"
        assert ck["i"] >= 1
        last = ck["i"]
    assert mid_write >= 3, (
        f"only {mid_write} of 40 kills landed inside a write: the test did not test much"
    )
    assert last >= 1
    # the next write clears what killed writes left behind
    from common.checkpoint import save_checkpoint

    save_checkpoint(path, {"algo": "writer", "i": 0, "data": big})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


# ---- bad input at the edges, for every algorithm file --------------------------------------------
# (by the files' declared families: a copied file is refused as its parent is)
FAMILY_OF = {n: (declaration(n) or (None, ""))[1] for n in ALGOS}
MULTI_AGENT_ALGOS = {n for n, f in FAMILY_OF.items() if f == "multi-agent"}
DISCRETE_ONLY = {n for n, f in FAMILY_OF.items() if f == "DQN"}
CONTINUOUS_ONLY = {n for n, f in FAMILY_OF.items() if f == "DDPG/TD3/SAC"}


class _ContractBreaker:
    """A custom vec env that breaks the contract in one way (`fault`)."""

    def __init__(self, fault: str, num_envs: int = 1, device="cpu", seed=None):
        import gymnasium as gym

        self.fault, self.num_envs, self.device = fault, num_envs, torch.device(device)
        self.single_observation_space = gym.spaces.Box(-1, 1, (3,))
        self.single_action_space = (
            gym.spaces.Box(-1, 1, (1,)) if fault != "discrete" else gym.spaces.Discrete(2)
        )

    def _obs(self):
        if self.fault == "numpy":
            return torch.zeros(self.num_envs, 3).numpy()
        if self.fault == "shape":
            return torch.zeros(self.num_envs, 4)
        if self.fault == "device":
            return torch.zeros(self.num_envs, 3, device="meta")
        return torch.zeros(self.num_envs, 3)

    def reset(self, seed=None, options=None):
        return self._obs(), {}

    def step(self, actions):
        n = self.num_envs
        reward = torch.zeros(n, dtype=torch.float64 if self.fault != "int-reward" else torch.long)
        return (
            self._obs(),
            reward,
            torch.zeros(n, dtype=torch.bool),
            torch.zeros(n, dtype=torch.bool),
            {},
        )


for _fault in ("numpy", "shape", "device", "int-reward", "no-final-obs"):
    envs.register(f"Broken-{_fault}-v0", lambda fault=_fault, **kw: _ContractBreaker(fault, **kw))

CONTRACT = {
    "numpy": "reset\\(\\) obs is a numpy.ndarray, expected a torch.Tensor",
    "shape": "obs has shape \\(\\d+, 4\\), expected \\(\\d+, 3\\)",
    "device": "obs is on meta, expected the env's device cpu",
    "int-reward": "reward has dtype torch.int64, expected a floating-point tensor",
    "no-final-obs": "info must hold 'final_obs'",
}


def _other_kind_env(algo: str) -> tuple[str, str]:
    """(an env this file cannot train on, the expected message)"""
    if algo in MULTI_AGENT_ALGOS:
        return "CartPole-v1", "needs a multi-agent env"
    if algo in DISCRETE_ONLY:
        return "Pendulum-v1", "needs a Discrete action space"
    if algo in CONTINUOUS_ONLY:
        return "CartPole-v1", "needs a continuous \\(Box\\) action space"
    # ppo_vec, a2c, ppo_h, ppo_podracer: both kinds
    return "simple_spread", "is a multi-agent env .*use algos/"


def _bad_inputs(algo: str) -> dict:
    """case -> (Args overrides, expected exception type, message regex)"""
    kw = CONFIGS[algo]
    other, other_msg = _other_kind_env(algo)
    cases = {
        "unknown-env": (
            dict(env="CartPoel-v1"),
            ValueError,
            "unknown env id 'CartPoel-v1'. Did you mean|needs a multi-agent env "
            ".*'CartPoel-v1' is not one",
        ),
        "other-kind-env": (dict(env=other), ValueError, other_msg),
        "zero-envs": (dict(num_envs=0), ValueError, "num_envs must be a positive integer"),
        "total-below-one-step": (dict(total_steps=kw["num_envs"] - 1), ValueError, "--total-steps"),
        "out-dir-is-a-file": ("file", PermissionError, "pass a writable --out-dir"),
        "disk-full": ("disk", OSError, "MiB free on the disk"),
    }
    if algo not in MULTI_AGENT_ALGOS:
        cases["multi-agent-env"] = (
            dict(env="simple_spread"),
            ValueError,
            "is a multi-agent env .*use algos/",
        )
    # the contract checks (custom multi-agent envs: see common/ma_vec_env.py)
    if algo not in MULTI_AGENT_ALGOS:
        for fault, msg in CONTRACT.items():
            cases[f"custom-env-{fault}"] = (
                dict(env=f"Broken-{fault}-v0"),
                (TypeError, ValueError),
                msg,
            )
    if "num_minibatches" in kw:
        cases["minibatch-not-dividing"] = (
            dict(num_minibatches=7),
            ValueError,
            "not divisible by --num-minibatches 7",
        )
    if "learning_starts" in kw:
        cases["learning-starts-past-the-end"] = (
            dict(learning_starts=kw["total_steps"]),
            ValueError,
            "--learning-starts",
        )
    if "batch_size" in kw:
        cases["zero-batch"] = (dict(batch_size=0), ValueError, "--batch-size")
    return cases


BAD = [(a, c) for a in ALGOS for c in _bad_inputs(a)]


@pytest.mark.parametrize("algo,case", BAD, ids=[f"{a}-{c}" for a, c in BAD])
def test_bad_input_fails_before_training_naming_the_fix(algo, case, tmp_path, monkeypatch, capfd):
    """Refused before training, naming the fix; as a process: one line, exit status 2, no
    traceback."""
    module = _module(algo)
    over, exc, msg = _bad_inputs(algo)[case]
    out = tmp_path / "runs"
    kw = dict(CONFIGS[algo], out_dir=str(out))
    if over == "file":
        out.write_text("not a directory")
        over = {}
    elif over == "disk":
        from collections import namedtuple

        usage = namedtuple("usage", "total used free")
        monkeypatch.setattr(
            "shutil.disk_usage", lambda p: usage(10 * 2**30, 10 * 2**30 - 2**20, 2**20)
        )
        over = {}
    with pytest.raises(exc, match=msg) as e:
        module.main(module.Args(**{**kw, **over}))
    assert not out.is_dir() or not any(out.iterdir()), (
        "a refused run must not leave a run directory behind"
    )
    assert_user_error(e.value, capfd)


@pytest.mark.parametrize("algo", ALGOS)
def test_wrong_flag_names_the_right_one(algo, capsys):
    import tyro

    module = _module(algo)
    with pytest.raises(SystemExit) as e:
        tyro.cli(module.Args, args=["--num-env", "4"])
    assert e.value.code != 0
    assert "--num-envs" in capsys.readouterr().err


# ---- foreign, truncated and non-checkpoint files given to --resume -------------------------------
def _foreign_files(algo: str, tmp_path: Path) -> dict:
    """case -> (path, expected message)"""
    from common.checkpoint import save_checkpoint

    env = CONFIGS[algo]["env"]
    other_algo = "dqn" if algo != "dqn" else "sac"
    files = {}
    save_checkpoint(
        tmp_path / "other_algo.pt", {"algo": other_algo, "env_id": env, "args": {"env": env}}
    )
    files["another-algorithm"] = (
        tmp_path / "other_algo.pt",
        f"written by algos/{other_algo}.py, not algos/{algo}.py; load it with "
        f"algos/{other_algo}.py",
    )
    # a checkpoint of this file on `env`, resumed with --env MountainCar-v0 (no file's default env)
    save_checkpoint(tmp_path / "other_env.pt", {"algo": algo, "env_id": env, "args": {"env": env}})
    files["another-env"] = (tmp_path / "other_env.pt", f"trained on '{env}', not 'MountainCar-v0'")
    whole = (tmp_path / "other_env.pt").read_bytes()
    (tmp_path / "truncated.pt").write_bytes(whole[: len(whole) // 2])
    files["truncated"] = (tmp_path / "truncated.pt", "not a readable checkpoint .* truncated")
    torch.save({"state_dict": {"w": torch.zeros(2)}}, tmp_path / "plain.pt")
    files["plain-torch-file"] = (
        tmp_path / "plain.pt",
        "not a checkpoint of this library \\(found a dict without a format entry",
    )
    (tmp_path / "notes.txt").write_text("hello")
    files["text-file"] = (tmp_path / "notes.txt", "not a readable checkpoint")
    files["missing"] = (tmp_path / "nope.pt", "no checkpoint at")
    return files


FOREIGN = [
    (a, c)
    for a in ALGOS
    for c in (
        "another-algorithm",
        "another-env",
        "truncated",
        "plain-torch-file",
        "text-file",
        "missing",
    )
]


@pytest.mark.parametrize("algo,case", FOREIGN, ids=[f"{a}-{c}" for a, c in FOREIGN])
def test_resume_from_a_foreign_file_names_what_it_found(algo, case, tmp_path, capfd):
    module = _module(algo)
    (tmp_path / "files").mkdir()
    path, msg = _foreign_files(algo, tmp_path / "files")[case]
    kw = dict(CONFIGS[algo], out_dir=str(tmp_path / "runs"), resume=str(path))
    if case == "another-env":
        kw["env"] = "MountainCar-v0"
    with pytest.raises((ValueError, FileNotFoundError), match=msg) as e:
        module.main(module.Args(**kw))
    assert not (tmp_path / "runs").exists()
    assert_user_error(e.value, capfd)
