"""Fuzzing the front doors (issue 23): generated keyword arguments of `envs.make`, and generated
command lines of the algorithm files. Each case either works (the env resets and steps; the run
trains and returns) or fails with a user error, i.e. what a process would end with one line and exit
status 2 (`common.cli.user_error_message`), never with a traceback from deep inside.

Sizes stay in two bands: small enough to run in a moment, or far too large for any machine (refused
by a check, or by the allocator, which is one line too). Sizes in between would only fill this
machine's memory."""

from __future__ import annotations

import contextlib
import importlib
import io
import os

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import envs  # noqa: E402
from common.cli import _parse, user_error_message  # noqa: E402
from test_faults import ALGOS, CONFIGS  # noqa: E402

pytestmark = pytest.mark.slow
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "500"))  # envs.make calls (~5 s)
# command lines: each one that trains is a small run (~0.3 s); 500 took 2-2.7 min of the suite, 200
# ~1 min (FUZZ_EXAMPLES=1000 for a longer search)
CLI_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
CLI_FUZZ = settings(FUZZ, max_examples=CLI_EXAMPLES)


def _is_user_error(exc: BaseException) -> str:
    line = user_error_message(type(exc), exc, exc.__traceback__)
    assert line is not None, (
        f"not a user error (would print a traceback): {type(exc).__name__}: {exc}"
    )
    assert "\n" not in line.strip(), line
    return line


# ---- envs.make -----------------------------------------------------------------------------------
ENV_IDS = [
    "CartPole-v1",
    "Pendulum-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Chasing-v0",
    "GridReach-v0",
    "MaskedWalk-v0",
    "CartPoleNoVel-v0",
    "CartPoleNoisy-Privileged-v0",
    "simple_spread",
    "Hopper-v5",
    "Hopper",
    "CartPoel-v1",
    "cartpole",
    "",
    "module:factory",
    "no_such_module:make",
    "v1",
    "LunarLander-v3",
    "FrozenLake-v1",
    "Blackjack-v1",
]
SIZES = st.one_of(st.integers(-3, 9), st.sampled_from([2**40, 10**18, -(2**63)]))
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.text(max_size=6),
    st.lists(st.integers(), max_size=2),
)


@st.composite
def make_calls(draw):
    """envs.make's arguments, each valid three times in four and bad (out of range, wrong type)
    otherwise."""

    def pick(good, bad):
        return draw(bad if draw(st.integers(0, 3)) == 0 else good)

    env_id = pick(
        st.sampled_from(ENV_IDS[:12]),
        st.one_of(st.sampled_from(ENV_IDS[12:]), st.text(max_size=10), JUNK),
    )
    num_envs = pick(st.integers(1, 6), st.one_of(SIZES, JUNK))
    seed = pick(
        st.one_of(st.none(), st.integers(0, 10**6)), st.one_of(st.integers(-(2**70), 2**70), JUNK)
    )
    device = pick(
        st.just("cpu"),
        st.one_of(st.sampled_from(["CPU", "cuda", "cuda:3", "meta", "tpu", "", "cpu:0"]), JUNK),
    )
    extra = pick(
        st.just({}),
        st.dictionaries(
            st.sampled_from(
                [
                    "continuous_actions",
                    "max_episode_steps",
                    "render_mode",
                    "foo",
                    "mujoco_backend",
                    "vectorization_mode",
                    "episode_days",
                    "backend",
                ]
            ),
            st.one_of(JUNK, st.integers(-5, 50)),
            min_size=1,
            max_size=2,
        ),
    )
    return env_id, num_envs, seed, device, extra


def test_envs_make_either_steps_or_refuses_in_one_line():
    """500 generated calls; each steps or is a one-line user error, and both outcomes are a good
    share."""
    outcomes = {"stepped": 0, "refused": 0}

    @FUZZ
    @given(call=make_calls())
    def one(call):
        env_id, num_envs, seed, device, extra = call
        try:
            env = envs.make(env_id, num_envs=num_envs, device=device, seed=seed, **extra)
        except Exception as e:  # noqa: BLE001 - the point: whatever it is, it must be a user error
            _is_user_error(e)
            outcomes["refused"] += 1
            return
        try:
            env.reset(seed=seed)
            env.step(torch.as_tensor(env.action_space.sample(), device=env.device))
        finally:
            env.close()
        outcomes["stepped"] += 1

    one()
    assert outcomes["stepped"] >= EXAMPLES // 10 and outcomes["refused"] >= EXAMPLES // 10, outcomes


# ---- the algorithm files' command lines ----------------------------------------------------------
# flag -> values: in range, at the edges, out of range, of the wrong type (what tyro refuses)
VALUES = {
    "--num-envs": ["1", "2", "3", "0", "-4", "1099511627776", "2.5", "x"],
    "--total-steps": ["0", "-1", "1", "7", "64", "300", "1e3", "many"],
    "--seed": ["0", "-1", "4294967296", "99999999999999999999", "s"],
    "--batch-size": ["0", "-2", "1", "3", "32", "1000000000000", "b"],
    "--buffer-size": ["0", "-1", "1", "5", "200", "1000000000000", "big"],
    "--learning-rate": ["0", "-0.001", "0.001", "1e9", "nan", "inf", "fast"],
    "--gamma": ["0", "0.99", "1", "1.5", "-0.1", "nan"],
    "--learning-starts": ["0", "-5", "1", "50", "100000000"],
    "--num-steps": ["0", "-1", "1", "4", "1000000000000"],
    "--num-minibatches": ["0", "-1", "1", "2", "3", "1000000"],
    "--update-epochs": ["0", "-1", "1", "2"],
    "--hidden": ["", "0", "-3", "4", "8 8", "3 0 3", "x"],
    "--eval-every": ["0", "-1", "1", "100"],
    "--eval-episodes": ["0", "-1", "1", "3"],
    "--save-every": ["0", "-1", "1", "100"],
    "--target-every": ["0", "-1", "1", "10"],
    "--tau": ["0", "1", "-0.5", "2", "nan"],
    "--max-grad-norm": ["0", "-1", "0.5", "nan", "inf"],
    "--device": ["cpu", "cuda", "meta", "gpu"],
    "--num-critics": ["0", "1", "2", "-1"],
    "--gradient-steps": ["0", "-1", "1", "2"],
}


def _flags(module) -> dict:
    fields = {"--" + f.replace("_", "-") for f in module.Args.__dataclass_fields__}
    return {k: v for k, v in VALUES.items() if k in fields}


@st.composite
def command_lines(draw):
    algo = draw(st.sampled_from(ALGOS))
    module = importlib.import_module(f"algos.{algo}")
    flags = _flags(module)
    chosen = draw(st.lists(st.sampled_from(sorted(flags)), min_size=1, max_size=4, unique=True))
    argv = []
    for flag in chosen:
        value = draw(st.sampled_from(flags[flag]))
        argv += [flag, *value.split()]
    return algo, argv


def test_algorithm_command_lines_either_train_or_refuse_in_one_line(tmp_path_factory):
    """200 generated command lines; each trains, is refused by the parser (tyro's message, exit
    status 2) or is a one-line user error of the run, and each outcome is a good share."""
    outcomes = {
        "trained": 0,
        "refused_parse": 0,
        "refused_run": 0,
        "valid_not_run": 0,
        "diverged": 0,
    }

    @CLI_FUZZ
    @given(case=command_lines())
    def one(case):
        outcomes[_one_command_line(*case, tmp_path_factory.mktemp("fuzz"))] += 1

    one()
    assert (
        outcomes["trained"] >= CLI_EXAMPLES // 10 and outcomes["refused_run"] >= CLI_EXAMPLES // 20
    ), outcomes
    assert outcomes["refused_parse"] >= CLI_EXAMPLES // 20, outcomes


def _one_command_line(algo: str, argv: list[str], out) -> str:
    """Run one generated command line; returns its outcome (or fails the test)."""
    module = importlib.import_module(f"algos.{algo}")
    # the small test setting of this file first, the generated flags after it (tyro: the last one
    # wins)
    base = CONFIGS[algo]
    given_flags = set(argv[::2])
    base_argv = []
    for k, v in base.items():
        flag = "--" + k.replace("_", "-")
        if flag in given_flags or k in ("quiet", "out_dir"):
            continue
        if isinstance(v, bool):
            base_argv.append(flag if v else "--no-" + k.replace("_", "-"))
        elif isinstance(v, tuple):
            base_argv += [flag, *map(str, v)]
        else:
            base_argv += [flag, str(v)]
    full = [*base_argv, "--quiet", "--no-tensorboard", "--out-dir", str(out), *argv]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = _parse(module.Args, args=full)
    except SystemExit as e:
        # tyro's own message (the flag, what is wrong with it), exit status 2, no traceback
        text = err.getvalue()
        assert e.code == 2 and "Error" in text and "Traceback" not in text, (full, e.code, text)
        return "refused_parse"
    # valid, but a real run's size: not run here
    if args.total_steps > 4096 or args.num_envs > 4096:
        return "valid_not_run"
    if args.eval_every > 0 and args.total_steps / max(args.eval_every, args.num_envs) > 32:
        # valid, but mostly evaluation (--eval-every 1 evaluates after every vector step: 20-50 s of
        # episodes in the small settings); runs with that flag and a short --total-steps still run
        return "valid_not_run"
    try:
        result = module.main(args)
    except Exception as e:  # noqa: BLE001
        _is_user_error(e)
        # a valid setting that blew up (say --learning-rate 1e9): the guard stopped it, in one line
        return "diverged" if isinstance(e, FloatingPointError) else "refused_run"
    assert isinstance(result, dict) and "eval_return" in result, result
    return "trained"
