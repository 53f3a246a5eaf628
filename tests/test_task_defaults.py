"""Per-task defaults: every single-agent algorithm file reads one table, `TASK_DEFAULTS` (env id ->
settings over the dataclass defaults), through `default_args(env_id)`; the command line starts from
the row of its `--env`, a flag overrides the row, `--env X --help` shows the row's values, and
`--resume` treats them as "not set" (a checkpoint's own settings win)."""

import dataclasses
import importlib
import re
from pathlib import Path

import gymnasium as gym
import pytest

import envs
from common.checkpoint import resume_args
from common.cli import cli
from conftest import run_as_main

ROOT = Path(__file__).resolve().parents[1]
MULTI_AGENT = {"mappo", "vdn", "qmix", "maddpg", "matd3"}
FILES = sorted(
    p.stem
    for p in (ROOT / "algos").glob("*.py")
    if p.stem != "__init__" and p.stem not in MULTI_AGENT
)
ROWS = [
    (f, env_id) for f in FILES for env_id in importlib.import_module(f"algos.{f}").TASK_DEFAULTS
]


def known_env(env_id: str) -> bool:
    return (
        env_id in gym.registry
        or env_id in envs.NATIVE
        or env_id in envs.MINATAR
        or env_id in envs.VARIANTS
        or envs.mujoco_id(env_id) is not None
    )


@pytest.mark.parametrize("name", FILES)
def test_every_single_agent_file_reads_a_task_table(name):
    mod = importlib.import_module(f"algos.{name}")
    fields = {f.name for f in dataclasses.fields(mod.Args)}
    for env_id, row in mod.TASK_DEFAULTS.items():
        assert row, f"algos/{name}.py: empty TASK_DEFAULTS row for {env_id}"
        assert set(row) <= fields, (
            f"algos/{name}.py: {env_id} row names no setting: {set(row) - fields}"
        )
        assert known_env(env_id), f"algos/{name}.py: TASK_DEFAULTS row for unknown env {env_id}"
        assert "env" not in row and "seed" not in row
    plain = mod.default_args("NoRow-v0")  # a task without a row: the dataclass's defaults
    assert plain == dataclasses.replace(mod.Args(), env="NoRow-v0")


@pytest.mark.parametrize("name,env_id", ROWS, ids=[f"{n}-{e}" for n, e in ROWS])
def test_the_command_line_starts_from_the_row_and_a_flag_overrides_it(name, env_id):
    mod = importlib.import_module(f"algos.{name}")
    row = mod.TASK_DEFAULTS[env_id]
    args = cli(mod.Args, argv=["--env", env_id], defaults_for=mod.default_args)
    for k, v in row.items():
        assert getattr(args, k) == v, (
            f"{name} --env {env_id}: {k} is {getattr(args, k)}, the row says {v}"
        )
    # a scalar setting of the row
    k = next((k for k, v in row.items() if type(v) in (int, float, bool)), None)
    other = {int: lambda v: v + 1, float: lambda v: v * 2, bool: lambda v: not v}.get(
        type(row.get(k))
    )
    if other is not None:
        flag = f"--{k.replace('_', '-')}"
        argv = (
            ([flag] if other(row[k]) is True else [f"--no-{k.replace('_', '-')}"])
            if isinstance(row[k], bool)
            else [flag, str(other(row[k]))]
        )
        assert getattr(
            cli(mod.Args, argv=["--env", env_id, *argv], defaults_for=mod.default_args), k
        ) == other(row[k])
    # resuming a run of this task: the row's values count as "not set", the checkpoint's settings
    # win
    saved = dataclasses.asdict(dataclasses.replace(mod.default_args(env_id), seed=7))
    got = resume_args(
        dataclasses.replace(args, resume="ck.pt"),
        {"args": saved},
        defaults=mod.default_args(env_id),
    )
    assert got.seed == 7 and all(getattr(got, k) == v for k, v in row.items())


def test_help_shows_the_rows_values():
    """`python algos/<file>.py --env X --help` lists the defaults that run would use (one file per
    family)."""
    rows = []
    for name in ("ppo_vec", "pqn", "sac", "td3"):
        env_id, row = next(iter(importlib.import_module(f"algos.{name}").TASK_DEFAULTS.items()))
        rows.append((name, env_id, row))
    runs = run_as_main(
        *[("path", f"algos/{name}.py", ["--env", env_id, "--help"]) for name, env_id, _ in rows],
        env={"COLUMNS": "250"},
    )
    shown = 0
    for (name, env_id, row), out in zip(rows, runs):
        assert out.returncode == 0, out.stderr
        flat = " ".join(out.stdout.replace("│", " ").split())
        for k, v in row.items():
            text = " ".join(map(str, v)) if isinstance(v, tuple) else str(v)
            # the first "(default: ...)" after some mention of the flag
            flag = f"--{k.replace('_', '-')} "
            after = [
                re.search(r"\(default: ([^)]*)\)", flat[i.start() :])
                for i in re.finditer(re.escape(flag), flat)
            ]
            assert text in [m.group(1) for m in after if m], (name, env_id, k, v)
            shown += 1
    assert shown, "no TASK_DEFAULTS row in ppo_vec, pqn, sac or td3"


def test_the_ppo_pendulum_learning_budget_is_the_row_a_user_gets():
    """conftest.PPO_PENDULUM writes ppo_vec's Pendulum-v1 row out (the adapter test passes it as
    flags to a factory env id, which has no row), and ppo_h shares it: a change to the row must
    reach the tests that learn with it."""
    from conftest import PPO_PENDULUM

    for name in ("ppo_vec", "ppo_h"):
        row = importlib.import_module(f"algos.{name}").TASK_DEFAULTS["Pendulum-v1"]
        assert {k: PPO_PENDULUM[k] for k in row} == row, name


def test_help_names_the_flags_the_tasks_row_sets(capsys):
    """`--env X --help` says, above the flags, which defaults X's row changed (so a user sees where
    `--gamma 0.9` comes from), in flag syntax; a task without a row says that instead."""
    from algos import dqn, ppo_vec, sac

    def note(mod, env_id):
        with pytest.raises(SystemExit) as e:
            cli(mod.Args, "doc", defaults_for=mod.default_args, argv=["--env", env_id, "--help"])
        assert e.value.code == 0
        out = " ".join(capsys.readouterr().out.split())
        return out[
            out.index("Defaults below") : out.index("(set for this task")
            if "(set for" in out
            else None
        ]

    got = note(ppo_vec, "Pendulum-v1")
    row = ppo_vec.TASK_DEFAULTS["Pendulum-v1"]
    for k, v in row.items():
        flag = "--" + k.replace("_", "-")
        assert (flag if v is True else f"{flag} {v}") in got, (k, v, got)
    assert got.count("--") == len(row), got  # nothing the row leaves alone
    assert "--no-autotune" in note(sac, "MountainCarContinuous-v0")
    assert "has no row" in note(dqn, "Acrobot-v1")


def test_help_lists_the_tasks_that_have_a_row(capsys):
    """`--help` names every task the file has a row for (an off-policy file's MuJoCo and Box2D
    rows among them), whichever `--env` it is shown for."""
    from algos import dqn, sac, td3

    for mod, env_id in ((sac, "Pendulum-v1"), (td3, "Acrobot-v1"), (dqn, "CartPole-v1")):
        with pytest.raises(SystemExit):
            cli(mod.Args, "doc", defaults_for=mod.default_args, argv=["--env", env_id, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        listed = out[out.index("Tasks with a row: ") :].split(". ")[0]
        assert listed == "Tasks with a row: " + ", ".join(mod.TASK_DEFAULTS), (env_id, listed)
    for task in ("HalfCheetah-v5", "Hopper-v5", "LunarLanderContinuous-v3", "BipedalWalker-v3"):
        assert task in sac.TASK_DEFAULTS and task in td3.TASK_DEFAULTS, task


def test_an_atari_id_without_a_row_points_to_the_papers_flags(capsys):
    """`--env ALE/<Game>-v5` on a file without an Atari row runs its small-task defaults: the run
    says so on stderr, and `--help` too, naming where the papers' Atari flags are."""
    from algos import pqn

    args = cli(pqn.Args, "doc", defaults_for=pqn.default_args, argv=["--env", "ALE/Pong-v5"])
    assert args.env == "ALE/Pong-v5"
    assert "no row for ALE/Pong-v5" in capsys.readouterr().err
    cli(pqn.Args, "doc", defaults_for=pqn.default_args, argv=["--env", "CartPole-v1"])
    assert capsys.readouterr().err == ""  # a task with a row, or not Atari: no note
    with pytest.raises(SystemExit):
        cli(pqn.Args, "doc", defaults_for=pqn.default_args, argv=["--env", "ALE/Pong-v5", "-h"])
    assert "Learning from pixels" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):  # a wrong flag: its one error, and no note before it
        cli(pqn.Args, "doc", defaults_for=pqn.default_args, argv=["--env=ALE/Pong-v5", "--lr", "1"])
    assert "no row" not in capsys.readouterr().err


# The published settings (MuJoCo v5 at CleanRL's 1M-step setting, Box2D at RL Zoo's) are a family's
# rows: a variant runs its parent's, unless it runs its own paper's (`OWN_ROWS`, with why). A field
# the parent lacks may join the row (ppo_h's H-term store sized to BipedalWalker's episodes), and
# one the variant lacks leaves it (ppo_vec's Gaussian initial std, where ppo_beta has a Beta).
PUBLISHED = {"Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5"} | {
    "LunarLanderContinuous-v3",
    "BipedalWalker-v3",
}
OWN_ROWS = {
    "sac": "SAC's published settings (CleanRL's SAC, RL Zoo's sac.yml), not td3's",
    "fast_td3": "FastTD3's own setting (many sub-envs, its paper's batch and noise), not td3's",
    "redq": "REDQ's paper setting on MuJoCo (utd 20, 300k steps); no published Box2D setting",
    "a2c": "A2C's settings differ from PPO's (no minibatches or epochs); its rows are its own",
    "ppo_rnn": "a recurrent policy measured on its own tasks (Acrobot, partial observations)",
}


@pytest.mark.parametrize("name", [f for f in FILES if f not in OWN_ROWS])
def test_a_variant_runs_its_parents_published_rows(name):
    mod = importlib.import_module(f"algos.{name}")
    if mod.PARENT is None:
        return
    parent_mod = importlib.import_module(f"algos.{mod.PARENT}")
    fields = [{f.name for f in dataclasses.fields(m.Args)} for m in (parent_mod, mod)]
    shared = set.intersection(*fields)
    for env_id in sorted(PUBLISHED & set(parent_mod.TASK_DEFAULTS)):
        row, parent = mod.TASK_DEFAULTS.get(env_id), parent_mod.TASK_DEFAULTS[env_id]
        row, parent = ({k: v for k, v in r.items() if k in shared} for r in (row or {}, parent))
        assert row == parent, (
            f"algos/{name}.py: its {env_id} row is not {mod.PARENT}'s (copy the parent's row, or "
            f"name the file in OWN_ROWS with the paper it follows)"
        )
