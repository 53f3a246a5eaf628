"""Every entry point, as a process, ends a user error with one line, `error: <what> — <the fix>`,
exit status 2 and no traceback; `PODRACER_DEBUG=1` shows the traceback. A command line that tyro
refuses gets tyro's own message instead (exit status 2, no traceback).

The complete matrix (every algorithm file x every class of bad input, foreign checkpoints, a full
disk, changed spaces, old formats) runs in-process in tests/test_faults.py, test_run.py and
test_resume.py, through the same hook a process uses (`conftest.assert_user_error`). Here real
processes: each algorithm file with one class of error (rotating, so that every class meets two or
three files), and the other entry points (evaluation, export, the population tool, the benchmark
scripts)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from test_faults import ALGOS, MULTI_AGENT_ALGOS, _other_kind_env

# class -> (argv builder(tmp_path, algo), message regex); the env a case needs goes in `_ENV`
CLASSES = {
    "unknown-env": (lambda t, a: ["--env", "CartPoel-v1"], r"CartPoel-v1"),
    "wrong-action-kind": (
        lambda t, a: ["--env", _other_kind_env(a)[0]],
        r"action space|multi-agent env",
    ),
    "impossible-size": (lambda t, a: ["--num-envs", "0"], r"num_envs must be a positive integer"),
    # refused by tyro: its own message (the flag, the closest ones), exit status 2, no traceback
    "misspelled-flag": (
        lambda t, a: ["--num-env", "4"],
        r"(?s)Unrecognized options: --num-env.*Perhaps you meant.*--num-envs",
    ),
    "bad-value": (
        lambda t, a: ["--seed", "abc"],
        r"Error parsing --seed: invalid literal for int\(\) with base 10: 'abc'",
    ),
    "missing-checkpoint": (
        lambda t, a: ["--resume", str(t / "nope.pt")],
        r"no checkpoint at .*nope\.pt",
    ),
    "foreign-checkpoint": (
        lambda t, a: ["--resume", str(t / "notes.txt")],
        r"not a readable checkpoint",
    ),
    "unwritable-out-dir": (
        lambda t, a: ["--out-dir", str(t / "notes.txt")],
        r"pass a writable --out-dir",
    ),
    "broken-custom-env": (
        lambda t, a: ["--env", "brokenenv:make"],
        r"reset\(\) obs is a numpy\.ndarray, expected a torch\.Tensor",
    ),
}
NAMES = list(CLASSES)


# every file meets one class, in turn (a multi-agent file passes the single-agent broken env on to
# the next file), so that every class meets two or three files; each process start costs ~2 s, and
# test_faults.py runs the whole matrix in-process
def _rotate():
    names, held, out = itertools.cycle(NAMES), None, []
    for a in ALGOS:
        c, held = held or next(names), None
        if a in MULTI_AGENT_ALGOS and c == "broken-custom-env":
            c, held = next(names), c
        out.append((a, c))
    return out


CASES = _rotate()

BROKEN_ENV = '''
import gymnasium as gym
import torch


class Broken:
    """A custom env that breaks the vec-env contract: its observations are numpy arrays."""
    def __init__(self, num_envs=1, device="cpu", seed=None, **kw):
        self.num_envs, self.device = num_envs, torch.device(device)
        self.single_observation_space = gym.spaces.Box(-1, 1, (3,))
        self.single_action_space = gym.spaces.Box(-1, 1, (1,))

    def reset(self, seed=None, options=None):
        return torch.zeros(self.num_envs, 3).numpy(), {}

    def step(self, actions):
        raise AssertionError("never reached")


def make(**kw):
    return Broken(**kw)
'''


def _files(tmp_path):
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    (tmp_path / "brokenenv.py").write_text(BROKEN_ENV)
    fake = tmp_path / "fake" / "genesis"  # Genesis "not installed": importing it fails
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'genesis'\")\n")


def _run(argv: list[str], tmp_path, **extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PODRACER_DEBUG"}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    env.update(extra)
    return subprocess.run(
        [sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=180
    )


# what tyro refuses: its own message, several lines, not our one line
TYRO = {"misspelled-flag", "bad-value", "evaluate-misspelled-flag"}


def _assert_one_line(out: subprocess.CompletedProcess, msg: str, case: str = "") -> None:
    import re

    if case in TYRO:
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
        assert re.search(msg, out.stderr), (msg, out.stderr)
        return
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2, (out.returncode, out.stderr[-3000:])
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in out.stderr, (
        out.stderr[-3000:]
    )
    assert re.search(msg, err[0]), (msg, err[0])


@pytest.mark.slow
@pytest.mark.parametrize("algo,case", CASES, ids=[f"{a}-{c}" for a, c in CASES])
def test_algorithm_files_end_a_user_error_in_one_line(algo, case, tmp_path):
    _files(tmp_path)
    build, msg = CLASSES[case]
    out = _run([str(ROOT / "algos" / f"{algo}.py"), *build(tmp_path, algo)], tmp_path)
    _assert_one_line(out, msg, case)
    assert not (tmp_path / "runs").exists(), "a refused run leaves no run directory"


def test_every_class_meets_several_files():
    for c in CLASSES:
        assert sum(case == c for _, case in CASES) >= 2, c


OTHER = {
    "missing-optional-dependency": (
        ["{root}/algos/ppo_vec.py", "--env", "GenesisGo2-v0"],
        r"GenesisGo2-v0 needs Genesis .*pip install genesis-world",
        {"PYTHONPATH": "{fake}"},
    ),
    "evaluate-missing-checkpoint": (
        ["-m", "tools.evaluate", "{tmp}/nope.pt"],
        r"no checkpoint at",
        {},
    ),
    "evaluate-foreign-checkpoint": (
        ["-m", "tools.evaluate", "{tmp}/notes.txt"],
        r"not a readable checkpoint",
        {},
    ),
    "evaluate-misspelled-flag": (
        ["-m", "tools.evaluate", "{tmp}/nope.pt", "--episode", "3"],
        r"(?s)Unrecognized options: --episode.*--episodes",
        {},
    ),
    "export-nothing-to-write": (
        ["-m", "tools.export", "{tmp}/nope.pt"],
        r"nothing to write: pass --onnx PATH",
        {},
    ),
    "export-missing-checkpoint": (
        ["-m", "tools.export", "{tmp}/nope.pt", "--onnx", "{tmp}/p.onnx"],
        r"no checkpoint at",
        {},
    ),
    "population-unknown-algorithm": (["-m", "population", "--algo", "ppo_vecc"], r"ppo_vecc", {}),
    "population-bad-size": (
        ["-m", "population", "--algo", "ppo_vec", "--population", "0"],
        r"--population",
        {},
    ),
    "stock-backtest-no-checkpoint": (
        ["-m", "tools.backtest"],
        r"pass the checkpoint to backtest \(or --info\) — see",
        {},
    ),
    "stock-backtest-bad-csv": (
        ["-m", "tools.backtest", "--info"],
        r"notes.txt: empty CSV; expected a header",
        {"STOCK_TRADING_CSV": "{tmp}/notes.txt"},
    ),
    "sweep-unknown-field": (
        [
            "{root}/bench/sweep.py",
            "dqn",
            "CartPole-v1",
            "--steps",
            "1000",
            "--threshold",
            "400",
            "--grid",
            "learning_rat=1e-3,3e-4",
        ],
        r"no setting 'learning_rat'; did you mean 'learning_rate'\?",
        {},
    ),
    "bench-peer-checkout-unset": (
        ["{root}/bench/run.py", "jax", "--only", "purejaxrl"],
        r"set PUREJAXRL=/path/to/that/checkout",
        {"PUREJAXRL": ""},
    ),
    "bench-bad-flag": (
        ["{root}/bench/run.py", "peers", "--seedz"],
        r"unrecognized arguments: --seedz — see",
        {},
    ),
    "diverged-run": (
        [
            "{root}/algos/dqn.py",
            "--total-steps",
            "2000",
            "--learning-starts",
            "100",
            "--learning-rate",
            "1e9",
            "--eval-every",
            "0",
            "--quiet",
            "--no-tensorboard",
        ],
        r"non-finite value \(NaN or Inf\) in the TD loss .*\(a lower --learning-rate helps",
        {},
    ),
    "sweep-unknown-algorithm": (
        ["{root}/bench/sweep.py", "dqnn", "CartPole-v1", "--steps", "1000", "--threshold", "400"],
        r"no algorithm file algos/dqnn.py",
        {},
    ),
    "sweep-jobs-with-clock": (
        [
            "{root}/bench/sweep.py",
            "dqn",
            "CartPole-v1",
            "--steps",
            "1000",
            "--threshold",
            "400",
            "--clock",
            "--jobs",
            "2",
        ],
        r"--jobs > 1 with --clock would time runs that share cores",
        {},
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(OTHER))
def test_other_entry_points_end_a_user_error_in_one_line(case, tmp_path):
    _files(tmp_path)
    argv, msg, env = OTHER[case]
    sub = dict(root=ROOT, tmp=tmp_path, fake=os.pathsep.join([str(tmp_path / "fake"), str(ROOT)]))
    out = _run(
        [a.format(**sub) for a in argv], tmp_path, **{k: v.format(**sub) for k, v in env.items()}
    )
    _assert_one_line(out, msg, case)


@pytest.mark.slow
def test_debug_shows_the_traceback(tmp_path):
    out = _run(
        [str(ROOT / "algos" / "dqn.py"), "--env", "CartPoel-v1"], tmp_path, PODRACER_DEBUG="1"
    )
    assert (
        out.returncode == 1
        and "Traceback" in out.stderr
        and "unknown env id 'CartPoel-v1'" in out.stderr
    )


@pytest.mark.slow
def test_a_bug_keeps_its_traceback(tmp_path):
    """A ValueError raised inside a library (not by a `raise` of ours) is a bug to report: full
    traceback."""
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from common.cli import install_error_hook\n"
        "install_error_hook()\n"
        "import numpy\n"
        "numpy.zeros(2).reshape(3)\n"
    ) % str(ROOT)
    out = _run(["-c", code], tmp_path)
    assert out.returncode == 1 and "Traceback" in out.stderr, out.stderr


def test_the_class_decides_not_the_source_line():
    """A `UserError` (and each of its kinds, still the built-in a caller would catch) is one line; a
    plain `ValueError` raised by our own code is a bug like any other and keeps its traceback."""
    from common.cli import user_error_message
    from common.errors import (
        Diverged,
        MissingPackage,
        UserError,
        UserFileNotFoundError,
        UserTypeError,
    )

    for exc, base in [
        (UserError("x"), ValueError),
        (UserTypeError("x"), TypeError),
        (UserFileNotFoundError("x"), FileNotFoundError),
        (MissingPackage("x"), ImportError),
        (Diverged("x"), FloatingPointError),
    ]:
        assert isinstance(exc, base)
        assert user_error_message(type(exc), exc, None) == "error: x"
    try:
        raise ValueError("an invariant of ours broke")
    except ValueError as e:
        assert user_error_message(ValueError, e, e.__traceback__) is None


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo_vec", "sac"])
def test_ctrl_c_names_the_checkpoint_to_resume_from(algo, tmp_path):
    """Ctrl-C anywhere in a run, the file's own loop body included, ends with one line naming the
    intact checkpoint and the `--resume` that continues it, exit status 130, no traceback."""
    import signal
    import time

    env = {k: v for k, v in os.environ.items() if k != "PODRACER_DEBUG"}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    task = "CartPole-v1" if algo == "ppo_vec" else "Pendulum-v1"
    # the child gets SIGINT's default action back: a pytest-xdist worker ignores SIGINT, and an
    # ignored signal is inherited across exec (Python then installs no KeyboardInterrupt handler)
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "algos" / f"{algo}.py"),
            "--env",
            task,
            "--save-every",
            "512",
            "--total-steps",
            "10000000",
            "--eval-every",
            "0",
            "--quiet",
            "--out-dir",
            str(tmp_path),
        ],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.time() + 120
        while not list(tmp_path.glob("*/checkpoint.pt")) and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)  # well inside the loop
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()  # never left running (a no-op once it has exited)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "continue with --resume" in err, err[-2000:]
