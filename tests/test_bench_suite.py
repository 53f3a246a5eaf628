"""The benchmark harness: a group's rows (bench/experiments.py) are runnable commands of the
algorithm files; the runner (bench/run.py) skips complete runs and resumes stopped ones; the report
(bench/report.py) reads saved metrics only and states what it measured (the final evaluation's
interquartile mean over seeds with its bootstrap interval, the stable solve, the probability of
improvement, references), and its curves are drawn."""

import functools
import json
import re
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import experiments  # noqa: E402
import report  # noqa: E402
import run as runner  # noqa: E402


def _write_run(path, evals):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for step, secs, ret in evals:
            # a log tick
            f.write(
                json.dumps({"step": step, "seconds": secs, "sps": 1.0, "return": ret - 1}) + "\n"
            )
            f.write(
                json.dumps({"step": step, "seconds": secs, "sps": 1.0, "eval_return": ret}) + "\n"
            )


@pytest.fixture
def fake_group(tmp_path, monkeypatch):
    rows = [
        experiments.Row("fake", "ppo_vec", "CartPole-v1", 300, 100, (1, 2), threshold=475),
        experiments.Row(
            "fake", "dqn", "CartPole-v1", 300, 100, (1, 2), threshold=475, against="ppo_vec"
        ),
    ]
    monkeypatch.setattr(experiments, "ROWS", experiments.ROWS + rows)
    runs = tmp_path / "fake" / "runs"
    _write_run(
        runs / "CartPole-v1__ppo_vec__s1.jsonl",
        [(100, 1.0, 100.0), (200, 2.0, 480.0), (300, 3.0, 500.0)],
    )
    _write_run(
        runs / "CartPole-v1__ppo_vec__s2.jsonl",
        [(100, 2.0, 480.0), (200, 4.0, 300.0), (300, 6.0, 490.0)],
    )
    _write_run(
        runs / "CartPole-v1__dqn__s1.jsonl", [(100, 5.0, 20.0), (200, 9.0, 30.0), (300, 13.0, 40.0)]
    )
    # dqn seed 2 missing: the report uses the seeds it has and says how many
    return tmp_path


def test_report_table_and_curves(fake_group):
    text = report.report("fake", fake_group)
    row = next(line for line in text.splitlines() if line.startswith("| CartPole-v1 | ppo_vec"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "300"
    # two seeds: the IQM is their mean; a resample of two is both low, mixed or both high
    assert cells[3] == "495.0 [490.0, 500.0]"
    assert cells[4] == "500.0, 490.0"
    assert cells[5] == f"{np.mean([3.0, 6.0]):.0f}"
    # stable: seed 1 from step 200 (2 s); seed 2 dips below after its first hit, so from step 300
    assert cells[6] == f"{np.mean([300 / 3.0, 300 / 6.0]):,.0f}"  # env steps per second
    assert cells[7] == f"250 steps, {np.mean([2.0, 6.0]):.0f} s (2/2 >= 475)"
    assert "RL Zoo: 500.0 +- 0.0 (100k)" in cells[9]
    dqn = next(line for line in text.splitlines() if line.startswith("| CartPole-v1 | dqn"))
    assert "40.0 [40.0, 40.0]" in dqn and "never (>= 475)" in dqn
    # every dqn seed below every ppo_vec seed; 300 / 13 env steps/s against 100 and 50
    ratio = 300 / 13 / np.mean([100, 50])
    assert f"| 0.00 [0.00, 0.00]; speed {ratio:.2f}x [" in dqn
    # at 3 s, ppo_vec's shortest run: dqn's first value (its first evaluation comes at 5 s) against
    # ppo_vec's seeds there (500 at its end; 390 half-way from 480 to 300): their mean, 445
    assert "; at 3 s: 20.0 vs 445.0 vs ppo_vec |" in dqn
    assert "mean return over 10 episodes" in text and "RL Baselines3 Zoo" in text
    png = fake_group / "fake" / "fake_CartPole-v1.png"
    assert png.is_file() and png.stat().st_size > 10_000
    assert (fake_group / "fake" / "fake.md").read_text() == text


def test_report_against_a_peer_reads_gymnasium_finals_and_equal_training_time(
    tmp_path, monkeypatch
):
    """A row against a peer's (the locomotion groups): the final policies on gymnasium's env in
    their own column, the return of both at equal training seconds (the clock less the
    evaluations), and the README's line of ranges over tasks."""
    rows = [
        experiments.Row(
            "fake2",
            "ppo_vec",
            env,
            200,
            100,
            (1, 2),
            threshold=2000,
            gym_final=True,
            against="rsl_rl",
        )  # fmt: skip
        for env in ("Hopper-v5", "Ant-v5")
    ] + [
        experiments.Row("fake2", "rsl_rl:ppo", env, 200, 100, (1, 2), name="rsl_rl", threshold=2000)
        for env in ("Hopper-v5", "Ant-v5")
    ]
    monkeypatch.setattr(experiments, "ROWS", experiments.ROWS + rows)
    runs = tmp_path / "fake2" / "runs"
    runs.mkdir(parents=True)

    def write(key, evals, gym):  # (step, clock seconds, eval seconds, return); gymnasium's final
        lines = [dict(step=st, seconds=t, eval_seconds=e, eval_return=r) for st, t, e, r in evals]
        lines.append(dict(step=evals[-1][0], gym_return=gym))
        (runs / f"{key}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    for env in ("Hopper-v5", "Ant-v5"):
        for seed in (1, 2):  # ours: 2 s of each clock reading is evaluation
            write(f"{env}__ppo_vec__s{seed}", [(100, 11, 1, 1000), (200, 22, 1, 3000)], 3100)
            write(f"{env}__rsl_rl__s{seed}", [(100, 40, 0, 500), (200, 80, 0, 2500)], 2400)
    text = report.report("fake2", tmp_path)
    ours = next(line for line in text.splitlines() if line.startswith("| Hopper-v5 | ppo_vec |"))
    assert "| 3100.0 [3100.0, 3100.0] (2 seeds) | 20 | 10 |" in ours, ours
    # equal training time: rsl_rl's shortest is 80 s, ours ended at 20 s (its final value); rsl_rl
    # at 20 s is before its first evaluation (its first value)
    assert "at 20 s: 3000.0 vs 500.0" in ours, ours
    assert report.ranges(report.collect("fake2", tmp_path)) == (
        "ppo_vec at 4.00x-4.00x rsl_rl's env steps/s and a higher final return on 2/2 tasks "
        "(Hopper 3100 vs 2400, Ant 3100 vs 2400)"
    )
    # a run stopped part-way (short of its budget, not recorded as finished): out, and named
    write("Ant-v5__rsl_rl__s2", [(100, 40, 0, 500)], 400)
    text = report.report("fake2", tmp_path)
    theirs = next(line for line in text.splitlines() if line.startswith("| Ant-v5 | rsl_rl |"))
    assert "| 2500.0 [2500.0, 2500.0] | 2500.0 |" in theirs, theirs
    assert "it starts again): Ant-v5__rsl_rl__s2 (100 of 200 steps)" in text


def test_the_whole_process_to_a_stable_solve_is_read_from_the_wall_clock(tmp_path):
    """`run.whole` turns the rows' wall clock into seconds since the process started; the stable
    solve's cell gives the whole process's seconds to it only where every solved seed has them."""
    path = tmp_path / "m.jsonl"
    rows = [(100, 1.0, 100.0, 1000.5), (200, 2.0, 480.0, 1003.0), (300, 3.0, 500.0, 1004.0)]
    path.write_text("".join(json.dumps(dict(step=s, seconds=t, eval_return=r, time=w)) + "\n"
                            for s, t, r, w in rows))  # fmt: skip
    runner.whole(path, started=1000.0, seconds=5.5)
    got = runner.load_rows(path)
    assert [r["wall"] for r in got] == [0.5, 3.0, 4.0] and got[-1]["process_seconds"] == 5.5
    row = experiments.Row("fake", "ppo_vec", "CartPole-v1", 300, 100, (1, 2), threshold=475)
    curves = {s: report.eval_curve(got) for s in (1, 2)}
    walls = {s: {r["step"]: r["wall"] for r in got} for s in (1, 2)}
    assert report._stable(row, curves, walls) == "200 steps, 2 s, whole process 3 s (2/2 >= 475)"
    assert report._stable(row, curves, {1: walls[1]}) == "200 steps, 2 s (2/2 >= 475)"


def test_stable_solve_is_the_first_evaluation_from_which_all_stay_solved():
    curve = [(1, 1.0, 500.0), (2, 2.0, 100.0), (3, 3.0, 480.0), (4, 4.0, 490.0)]
    assert report.stable_at(curve, 475) == (3, 3.0)
    assert report.stable_at(curve + [(5, 5.0, 470.0)], 475) is None


@pytest.mark.parametrize("group", ["quick", "peers", "stable"])
def test_the_docs_tables_and_readme_lines_are_the_reports(group, tmp_path, monkeypatch):
    """docs/results.md's tables and the README's lines are what `bash benchmark.sh report GROUP`
    makes of the checked-in metrics: generated, never copied by hand."""
    import shutil

    begin, end = report.markers(group)
    shutil.copytree(report.RESULTS / group / "runs", tmp_path / group / "runs")
    for name, path in (("DOCS", ROOT / "docs" / "results.md"), ("README", ROOT / "README.md")):
        monkeypatch.setattr(report, name, tmp_path / path.name)
        (tmp_path / path.name).write_text(f"{begin}\n{end}\n")
    report.report(group, tmp_path)
    for path in (ROOT / "docs" / "results.md", ROOT / "README.md"):
        text = path.read_text()
        if begin in text:
            block = text[text.index(begin) : text.index(end) + len(end)] + "\n"
            assert (tmp_path / path.name).read_text() == block


def test_report_without_metrics_names_the_command(tmp_path):
    with pytest.raises(SystemExit, match="bench/run.py quick"):
        report.report("quick", tmp_path)


@pytest.mark.parametrize("group", experiments.groups())
def test_group_commands_parse(group):
    """Every row's flags exist in its algorithm file (tyro parses the command)."""
    import importlib

    from common.cli import cli

    for row in (r for r in experiments.group(group) if not r.peer):
        module = importlib.import_module(f"algos.{row.algo}")
        argv = row.command(1, "runs", "python")[2:]
        args = cli(module.Args, argv=argv, defaults_for=getattr(module, "default_args", None))
        assert args.env == row.env and args.total_steps == row.steps


@pytest.mark.slow  # subprocesses training and resuming: seconds each
def test_runner_skips_complete_runs_and_resumes_a_stopped_one(tmp_path, monkeypatch):
    """A run stopped part-way goes on from its checkpoint (its curve kept); a complete one is not
    trained again."""
    import os

    monkeypatch.setattr(runner, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(runner, "RUNS", tmp_path / "runs")
    tiny = dict(num_envs=4, learning_starts=64, buffer_size=1000, hidden=(16,))
    part = experiments.Row("tiny", "dqn", "CartPole-v1", 256, 128, (1,), tiny, save_every=128)
    whole = experiments.Row("tiny", "dqn", "CartPole-v1", 512, 128, (1,), tiny, save_every=128)
    runner.run_one(part, 1, sys.executable)  # "stopped" at 256 steps, its checkpoint kept
    assert runner.complete(part, 1) and not runner.complete(whole, 1)
    # one process: each logged row's seconds since the process started, the whole on the last
    first = runner.load_rows(runner.metrics_file(part, 1))
    walls = [r["wall"] for r in first if "time" in r]
    assert len(walls) == len(first) and 0 < walls[0] <= walls[-1] <= first[-1]["process_seconds"]
    (wall, resumed) = runner.run_one(whole, 1, sys.executable)
    assert resumed and runner.complete(whole, 1)
    steps = [
        r["step"] for r in runner.load_rows(runner.metrics_file(whole, 1)) if "eval_return" in r
    ]
    assert steps == [128, 256, 384, 512]
    # resumed: two processes, no one process's clock
    assert "process_seconds" not in runner.load_rows(runner.metrics_file(whole, 1))[-1]
    meta = json.loads((tmp_path / "results" / "tiny" / "runs" / "commands.json").read_text())
    assert meta[whole.key(1)]["resumed"] and "--total-steps 512" in meta[whole.key(1)]["command"]
    # the share of the machine it had: its own cores busy (a CPU-bound process: some) and the rest
    # of the host's, as the report's machine cell shows them
    entry = meta[whole.key(1)]
    assert 0 < entry["cores"] <= (os.cpu_count() or 1) + 0.5 and "other_cores" in entry
    monkeypatch.setattr(experiments, "ROWS", experiments.ROWS + [whole])
    monkeypatch.setattr(report, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(report, "DOCS", tmp_path / "results.md")
    report.DOCS.write_text("")
    commands = []
    monkeypatch.setattr(runner, "run_commands", lambda cmds, *a: commands.append(cmds))
    runner.main(["tiny", "--jobs", "1"])  # nothing left to train: the report alone
    assert commands[0] == [["report.py", "tiny"]]  # (a fresh process: the table as it is now)
    text = report.report("tiny", tmp_path / "results")
    assert "| CartPole-v1 | dqn | 512 |" in text and "; cores busy: its " in text, text


@pytest.mark.slow  # subprocesses training and resuming: seconds each
def test_a_peer_row_runs_its_adapter_in_our_metrics_schema_and_is_compared(tmp_path, monkeypatch):
    """A peer's row (`sb3:dqn`) runs bench/peers/sb3.py: here with this interpreter (SB3 is a
    test-only dependency of the project; a real run builds bench/.venv-sb3), writing our metrics
    schema, which the report compares our row against; the evaluation time is left out of the
    training clock on both sides."""
    monkeypatch.setattr(runner, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(runner, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(runner, "venv", lambda name, python=None: sys.executable)
    tiny = dict(num_envs=4, learning_starts=64, buffer_size=1000, hidden=(16,))
    ours = experiments.Row("tiny", "dqn", "CartPole-v1", 512, 256, (1,), tiny, threshold=475,
                           against="sb3_dqn")  # fmt: skip
    sb3 = experiments.Row("tiny", "sb3:dqn", "CartPole-v1", 512, 256, (1,), name="sb3_dqn")
    assert runner.shown(sb3, 1).startswith("bench/.venv-sb3/bin/python bench/peers/sb3.py dqn ")
    for row in (ours, sb3):
        runner.run_one(row, 1, sys.executable)
        assert runner.complete(row, 1)
    theirs = runner.load_rows(runner.metrics_file(sb3, 1))
    assert [r["step"] for r in theirs] == [256, 512]  # after each 256-step rollout, and the final
    for r in theirs:
        assert {"step", "seconds", "eval_seconds", "eval_return", "eval_return_std"} <= set(r)
    curve = report.eval_curve(theirs)
    assert curve[-1][1] == pytest.approx(
        theirs[-1]["seconds"] - sum(r["eval_seconds"] for r in theirs)
    )
    monkeypatch.setattr(experiments, "ROWS", experiments.ROWS + [ours, sb3])
    text = report.report("tiny", tmp_path / "results")
    assert "| CartPole-v1 | dqn | 512 |" in text and "vs sb3_dqn" in text, text


@pytest.mark.slow  # subprocesses training and resuming: seconds each
def test_a_stopped_sb3_run_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    """An SB3 row with `save_every` (experiments.RESUMES: hours-long Box2D peers) checkpoints; a run
    stopped at 256 steps goes on to 512 from there: its evaluations up to the checkpoint kept, its
    clock and SB3's step count carried on. Other peers' rows pass no `--save-every`."""
    monkeypatch.setattr(runner, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(runner, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(runner, "venv", lambda name, python=None: sys.executable)
    row = functools.partial(experiments.Row, group="tiny", algo="sb3:dqn", env="CartPole-v1",
                            eval_every=128, seeds=(1,), name="sb3_dqn", save_every=128)  # fmt: skip
    part, whole = row(steps=256), row(steps=512)
    assert "--save-every 128" in runner.shown(whole, 1)
    assert "--save-every" not in runner.shown(row(steps=512, save_every=0), 1)
    assert "--save-every" not in runner.shown(row(steps=512, algo="rsl_rl:ppo"), 1)
    runner.run_one(part, 1, sys.executable)
    (ckpt,) = (tmp_path / "runs").rglob("checkpoint.json")
    assert json.loads(ckpt.read_text())["step"] == 256
    wall, resumed = runner.run_one(whole, 1, sys.executable)
    assert resumed and runner.complete(whole, 1)
    rows = runner.load_rows(runner.metrics_file(whole, 1))
    assert [r["step"] for r in rows] == [256, 512]  # SB3's DQN row: a rollout is 256 steps
    assert 0 < rows[0]["seconds"] < rows[1]["seconds"]
    assert json.loads(ckpt.read_text())["step"] == 512
    assert json.loads((ckpt.parent / "args.json").read_text())["resumed_at"] == 256
    assert sorted(f.name.split("-")[0] for f in ckpt.parent.glob("*-*")) == ["model", "replay"]
    runner.record(whole, 1, wall, resumed, capped=True)  # (as if its end went unrecorded)
    runner.run_one(whole, 1, sys.executable)  # resumed at its end: nothing to train
    assert [r["step"] for r in runner.load_rows(runner.metrics_file(whole, 1))] == [256, 512]
    assert runner.complete(whole, 1)


@pytest.mark.slow  # an SB3 subprocess stopped by the cap
def test_a_capped_sb3_run_checkpoints_where_it_stopped(tmp_path, monkeypatch):
    """The cap's Ctrl-C makes SB3's adapter write a checkpoint at the step it stopped at (none
    was due: `save_every` is past the budget), so the next call loses nothing."""
    monkeypatch.setattr(runner, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(runner, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(runner, "venv", lambda name, python=None: sys.executable)
    row = experiments.Row("tiny", "sb3:dqn", "CartPole-v1", 10**7, 10**6, (1,), name="sb3_dqn",
                          save_every=10**7)  # fmt: skip
    runner.run_one(row, 1, sys.executable, max_seconds=20)
    assert not runner.complete(row, 1)
    (ckpt,) = (tmp_path / "runs").rglob("checkpoint.json")
    assert json.loads(ckpt.read_text())["step"] > 0


# ---- the gpu group: migrated history, capped runs, no GPU ----------------------------------------
def test_gpu_report_is_the_harness_report_of_the_migrated_metrics(tmp_path, monkeypatch):
    """bench/results/gpu/gpu.md is the gpu group's report of its checked-in metrics (bench/gpu.py's
    parts, migrated): each row names the card, torch and date it ran on; ours against rsl_rl on the
    same Warp Ant at each run's env steps per training second, the ratio the README quotes; every
    migrated run counts as done."""
    import shutil

    shutil.copytree(report.RESULTS / "gpu" / "runs", tmp_path / "gpu" / "runs")
    monkeypatch.setattr(report, "DOCS", tmp_path / "results.md")
    report.DOCS.write_text("")
    text = report.report("gpu", tmp_path)
    assert (report.RESULTS / "gpu" / "gpu.md").read_text() == text

    def speed(label):
        curve = report.eval_curve(
            runner.load_rows(tmp_path / f"gpu/runs/Ant-v5__{label}__s1.jsonl")
        )
        return curve[-1][0] / curve[-1][1]

    x = speed("ppo_vec") / speed("rsl_rl")
    ant = next(line for line in text.splitlines() if line.startswith("| Ant-v5 | ppo_vec |"))
    assert f"speed {x:.2f}x [" in ant, ant
    assert "vs rsl_rl | NVIDIA H200, 16 CPU cores, torch 2.11.0+cu130, 2026-11-30 |" in ant
    assert f"{x:.2f}x rsl_rl's env-steps/s on Ant x4096" in (ROOT / "README.md").read_text()
    monkeypatch.setattr(runner, "RESULTS", tmp_path)
    meta = json.loads((tmp_path / "gpu" / "runs" / "commands.json").read_text())
    assert all("migrated_from" in m and "machine" in m and "date" in m for m in meta.values())
    for row in experiments.group("gpu"):
        assert runner.complete(row, 1) == (row.key(1) in meta), row.key(1)


@pytest.mark.slow  # a training subprocess
def test_a_run_that_ends_as_the_cap_comes_is_complete(tmp_path, monkeypatch):
    """The run ends just after the runner's look found it running, and the cap's time is past:
    the Ctrl-C reaches a process that has exited (exit status 0), and the run is recorded whole."""
    import os

    monkeypatch.setattr(runner, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(runner, "RUNS", tmp_path / "runs")
    wait4, looks = os.wait4, []

    def late(pid, options):
        looks.append(options)
        if len(looks) == 1:  # the first look: "running", said as the run ends (past its 1 s cap)
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # (ended, not reaped)
            return 0, 0, None
        return wait4(pid, options)

    monkeypatch.setattr(runner.os, "wait4", late)
    row = experiments.Row("tiny", "ppo_vec", "CartPole-v1", 2048, 1024, (1,), dict(num_envs=8))
    runner.run_one(row, 1, sys.executable, max_seconds=1)
    assert looks[:2] == [os.WNOHANG, 0]  # the cap came between: a Ctrl-C, then a wait to its end
    assert runner.complete(row, 1)
    meta = json.loads((tmp_path / "results" / "tiny" / "runs" / "commands.json").read_text())
    assert row.key(1) in meta


@pytest.mark.slow  # a training subprocess
def test_a_run_interrupted_from_outside_is_stopped_not_failed(tmp_path, monkeypatch, capsys):
    """Ctrl-C to the run's own process (a user stopping one run of a group): no traceback, its
    metrics so far copied and the line saying how to go on, as for a capped run."""
    import os
    import signal
    import time

    monkeypatch.setattr(runner, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(runner, "RUNS", tmp_path / "runs")
    wait4 = os.wait4

    def interrupted(pid, options):
        for _ in range(600):  # its first checkpoint, then Ctrl-C
            if list((tmp_path / "runs").rglob("checkpoint.pt")):
                break
            time.sleep(0.1)
        os.kill(pid, signal.SIGINT)
        return wait4(pid, options)

    monkeypatch.setattr(runner.os, "wait4", interrupted)
    row = experiments.Row("tiny", "ppo_vec", "CartPole-v1", 2**21, 4096, (1,),
                          dict(num_envs=8, num_steps=32), save_every=4096)  # fmt: skip
    runner.run_one(row, 1, sys.executable)
    out = capsys.readouterr().out
    assert "interrupted after" in out and "resumes it from its last checkpoint" in out, out
    assert not runner.complete(row, 1) and runner.metrics_file(row, 1).exists()


@pytest.mark.slow  # subprocesses training and resuming: seconds each
def test_runner_caps_a_run_and_the_next_call_resumes_it(tmp_path, monkeypatch, capsys):
    """`--max-seconds`: the run gets Ctrl-C, keeps its last checkpoint, its metrics so far are
    copied but not recorded as complete, and a line says how to go on; the next call resumes it from
    the checkpoint to its end, and records it with the machine it ran on."""
    from dataclasses import replace

    monkeypatch.setattr(runner, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(runner, "RUNS", tmp_path / "runs")
    flags = dict(num_envs=8, num_steps=32)
    row = experiments.Row(
        "tiny", "ppo_vec", "CartPole-v1", 2**21, 4096, (1,), flags, save_every=4096
    )
    runner.run_one(row, 1, sys.executable, max_seconds=20)  # far short of 2M steps
    out = capsys.readouterr().out
    assert (
        "capped after" in out
        and (
            "`python bench/run.py tiny --only CartPole-v1:ppo_vec --seeds 1` resumes it from its "
            "last checkpoint"
        )
        in out
    ), out
    assert not runner.complete(row, 1)
    meta = tmp_path / "results" / "tiny" / "runs" / "commands.json"
    assert row.key(1) not in json.loads(meta.read_text())
    ckpts = list((tmp_path / "runs" / "tiny" / row.key(1)).glob("*/checkpoint.pt"))
    assert ckpts, "no checkpoint within the cap"
    at = torch.load(ckpts[0], weights_only=False)["global_step"]
    partial = [
        r["step"] for r in runner.load_rows(runner.metrics_file(row, 1)) if "eval_return" in r
    ]
    assert partial and at in partial and partial[-1] < row.steps
    done = replace(row, steps=at + 8192)  # (the rest of a shorter budget: seconds, not minutes)
    wall, resumed = runner.run_one(done, 1, sys.executable)
    assert resumed and runner.complete(done, 1)
    steps = [
        r["step"] for r in runner.load_rows(runner.metrics_file(done, 1)) if "eval_return" in r
    ]
    assert steps == list(range(4096, done.steps + 1, 4096))
    entry = json.loads(meta.read_text())[done.key(1)]
    assert entry["resumed"] and "CPU cores, torch " in entry["machine"] and entry["date"]


def test_a_gpu_row_without_a_gpu_is_one_line_before_anything_runs(tmp_path, monkeypatch):
    """A row on `--device cuda` where torch sees no CUDA: the runner says so in one line (a user
    error: exit status 2) before it starts any run; `--list` and the report need no GPU."""
    from common.cli import user_error_message
    from common.errors import UserError

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    monkeypatch.setattr(runner, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(runner, "RUNS", tmp_path / "runs")
    with pytest.raises(UserError) as err:
        runner.main(["gpu", "--only", "Ant-v5:ppo_vec", "Ant-v5:rsl_rl"])
    line = user_error_message(UserError, err.value, None)
    assert line.startswith("error: no GPU: torch sees no CUDA device here, and 2 rows of group gpu")
    assert "Ant-v5:ppo_vec" in line and "bench/run.py report gpu" in line and "\n" not in line
    assert not (tmp_path / "runs").exists()
    runner.main(["gpu", "--only", "Ant-v5:ppo_vec", "--list"])


def test_gpu_profile_records_iterations_through_the_run_hooks(tmp_path):
    """bench/micro/gpu_profile.py's mechanics on the CPU with a small CartPole run: the profiler's
    schedule is stepped at each iteration's end (the `on_iteration` hook), the recorded iterations'
    wall time is positive, the op table is written, and the summary reads as a table."""
    from micro import gpu_profile

    prof = gpu_profile.profile(2, "CartPole-v1", 8, "cpu", tmp_path, runs=tmp_path)
    # CartPole's row: 4 steps a rollout
    assert prof["env_steps_per_iteration"] == 8 * 4 and prof["iterations"] == 2
    assert prof["wall_s_per_iteration"] > 0 and prof["gpu_busy_s_per_iteration"] == 0.0
    # NVML's busy share on CUDA only; the untraced iterations after the profile timed anyway
    assert prof["nvml_busy_share"] is None and prof["unprofiled_wall_s_per_iteration"] > 0
    assert len(prof["startup_s"]) == 3 and prof["capture_s"] is None  # (no graph on a CPU)
    assert "aten::addmm" in (tmp_path / "profile.txt").read_text()
    text = gpu_profile.table(prof, "no GPU")
    assert text.startswith("# Where ppo_vec's time goes (torch.profiler; no GPU)")
    assert "| kernel launches | 0 |" in text


# ---- bench/micro/locomotion_profile.py: every bucket is found on both sides ---------------------
@pytest.mark.slow
def test_locomotion_profile_finds_every_bucket_on_both_sides(tmp_path):
    """The profile reads functions by name (our env's and rsl_rl's): a rename must not quietly zero
    a bucket."""
    from micro import locomotion_profile as lp

    ours = lp.side_ours("Hopper", 8192, str(tmp_path))
    theirs = lp.side_rsl("Hopper", 4096)
    for side in (ours, theirs):
        assert side["steps"] in (4096, 8192)
        for bucket in ("physics", "env", "policy", "update"):
            assert 0 < side[bucket] < side["total"], (bucket, side)
        assert (
            sum(side[b] for b in ("physics", "env", "policy", "advantages", "update"))
            <= 1.05 * side["total"]
        )
    assert ours["advantages"] > 0
    text = lp.table("Hopper", {"ours": ours, "rsl_rl": theirs})
    assert "| physics |" in text and "| update |" in text and text.count("\n| ") >= 8


def test_sweep_values_parse_as_the_flags_take_them():
    """bench/sweep.py's grid values: numbers, booleans, and hidden-layer tuples (a one-layer net as
    `64x`)."""
    import sweep

    assert sweep._value("256x256") == (256, 256) and sweep._value("64x") == (64,)
    assert (
        sweep._value("64") == 64 and sweep._value("5e-3") == 5e-3 and sweep._value("true") is True
    )
    assert sweep._value("linear") == "linear" and sweep._value("x") == "x"


def test_sweep_ranks_the_stable_solve_then_how_soon_then_the_final():
    """A point whose seeds solve and stay solved ranks above one that solves sooner and then dips
    below the threshold at the end; among stable points the sooner one ranks first."""
    import sweep

    def curve(returns):
        return [(5_000 * (i + 1), float(i), v) for i, v in enumerate(returns)]

    steady = curve([100, 300, 500, 500, 480, 500])
    early = curve([500, 500, 490, 480, 500, 500])
    dipping = curve([500, 120, 500, 40, 500, 400])
    never = curve([100, 200, 300, 200, 100, 300])
    assert sweep.score([steady, never], 475) == (1, -15_000, 400)  # IQM of two: their mean
    assert sweep.score([dipping], 475)[:2] == (0, -float("inf"))
    assert sweep.score([early], 475) > sweep.score([steady], 475) > sweep.score([dipping], 475)
    assert sweep.score([steady], 475, clock=True)[1] == -2.0  # training seconds instead
    text = "\n".join(sweep.table([steady, dipping], (1, 2), 475))
    assert "| 1 | 500.0 | 500.0 | 15,000 steps, 2 s | 15,000 steps, 2 s |" in text
    assert "| 2 | 400.0 | 500.0 | 5,000 steps, 0 s | never |" in text and "on 1/2 seeds" in text
    assert sweep.label({"hidden": (64, 64), "learning_rate": 1e-3}) == (
        "hidden=64x64+learning_rate=0.001"
    )


def test_benchmark_sh_help_lists_every_group_it_runs():
    """`bash benchmark.sh --help` prints every group bench/run.py knows and exits 0; every command a
    group runs is a bench/ script or a group; an unknown group is one line pointing to --help,
    exit 2."""
    import subprocess

    help_ = subprocess.run(
        ["bash", "benchmark.sh", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert help_.returncode == 0 and help_.stdout.startswith("Reproduces the benchmark tables"), (
        help_.stderr
    )
    listed = set(re.findall(r"^  ([a-z][a-z0-9-]*) ", help_.stdout, re.M))
    assert set(experiments.groups()) | set(runner.SCRIPTS) <= listed
    assert len((ROOT / "benchmark.sh").read_text().splitlines()) <= 40
    for _, commands in runner.SCRIPTS.values():
        for cmd in (c[1:] if c[0].startswith("@") else c for c in commands):
            assert cmd[0] in runner.SCRIPTS or (ROOT / "bench" / cmd[0]).is_file(), cmd
    bad = subprocess.run(
        ["bash", "benchmark.sh", "no-such-group"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (
        bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--help" in bad.stderr
    )
    # an interpreter without torch (the venv not set up or not found): one line naming the set-up,
    # before any work, and no committed table touched
    import os
    import sys

    table = (ROOT / "bench/results/envs.md").read_bytes()
    bare = subprocess.run(
        ["bash", "benchmark.sh", "envs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHON": f"{sys.executable} -S -I"},
    )
    assert bare.returncode == 2 and len(bare.stderr.strip().splitlines()) == 1, bare.stderr
    assert "cannot import torch" in bare.stderr and "requirements.txt" in bare.stderr, bare.stderr
    assert (ROOT / "bench/results/envs.md").read_bytes() == table


def bench_scripts() -> list:
    """bench/'s Python files and its micro-benchmarks' (bench/micro/)."""
    return sorted([*(ROOT / "bench").glob("*.py"), *(ROOT / "bench" / "micro").glob("*.py")])


def test_every_bench_script_parses_its_command_line():
    """Every runnable bench/ script builds an argparse parser (a micro-benchmark: through
    bench/micro/timing.py's `parser`), so `--help` explains it and a wrong flag is refused, instead
    of starting a long measurement (bench/asymmetric_critic.py ignored its arguments and ran six
    trainings)."""
    runnable = [p for p in bench_scripts() if '__name__ == "__main__"' in p.read_text()]
    assert len(runnable) >= 15 and len([p for p in runnable if p.parent.name == "micro"]) >= 10
    parses = ("ArgumentParser(", "parser(__doc__)")
    unparsed = [p.name for p in runnable if not any(c in p.read_text() for c in parses)]
    assert unparsed == []


# ---- bench/ reaches the library through its hooks, never by replacing its names ------------------
# (none: bench/micro/gpu_profile.py times its capture through the `capture` hook)
PATCHING_INTERNALS: set[str] = set()


def library_assignments(path) -> list[str]:
    """`name.attr = ...` (or `setattr(name, ...)`) in `path` where `name` was imported from common/,
    envs/ or algos/."""
    import ast

    tree = ast.parse(path.read_text())
    ours = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            ours |= {
                (a.asname or a.name).split(".")[0]
                for a in node.names
                if a.name.split(".")[0] in ("common", "envs", "algos")
            }
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
            "common",
            "envs",
            "algos",
        ):
            ours |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Assign) and "import_module" in ast.unparse(node.value):
            ours |= {t.id for t in node.targets if isinstance(t, ast.Name)}  # an algorithm file
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setattr":
            targets = node.args[:1]
        for t in targets:
            root = t
            while isinstance(root, ast.Attribute):
                root = root.value
            # (setattr's first argument is the object itself: `setattr(module, "name", value)`)
            named = root is not t or isinstance(node, ast.Call)
            if named and isinstance(root, ast.Name) and root.id in ours:
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_bench_never_replaces_a_library_name(tmp_path):
    found = [
        hit
        for p in bench_scripts()
        if p.name not in PATCHING_INTERNALS
        for hit in library_assignments(p)
    ]
    assert found == [], f"use common.run.hooks (or an argument) instead: {found}"
    # and the check sees an assignment where there is one
    patching = tmp_path / "patching.py"
    patching.write_text(
        "import importlib\nimport common.run\nfrom common.graphs import Captured\n"
        "common.run.evaluate = None\nCaptured.simulate = True\n"
        "ppo = importlib.import_module('algos.ppo_vec')\nsetattr(ppo, 'Batch', dict)\n"
    )
    assert library_assignments(patching) == [f"patching.py:{n}" for n in (4, 5, 7)]


@pytest.mark.slow
def test_population_row_runs_through_the_runner(tmp_path, monkeypatch):
    """A population row (bench/peers/population.py, `python -m population` as a row): one metrics
    row a round with the best score so far, then the leaderboard's best on gymnasium's env."""
    monkeypatch.setattr(runner, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(runner, "RUNS", tmp_path / "runs")
    flags = dict(num_envs=64, num_steps=64, num_minibatches=4, update_epochs=1, population=2,
                 vary="learning_rate=3e-4,1e-3", pop_eval_episodes=2)  # fmt: skip
    row = experiments.Row("tiny", "population:generational", "Pendulum-v1", 16_384, 4096, (1,),
                          flags, gym_final=True)  # fmt: skip
    runner.run_one(row, 1, sys.executable)
    rows = runner.load_rows(runner.metrics_file(row, 1))
    curve = [r["eval_return"] for r in rows if "eval_return" in r]
    assert [r["step"] for r in rows if "eval_return" in r] == [4096, 8192, 12288, 16384]
    assert curve == sorted(curve)  # the best so far
    assert len(rows[-1]["gym_returns"]) == experiments.EVAL_EPISODES
    assert runner.complete(row, 1)


def test_a_row_on_every_core_says_so_in_its_command_and_its_table():
    """A row with `threads=0` (run alone on every core, as BipedalWalker's off-policy rows are)
    shows the thread count a user must set to reproduce its seconds, and the table's caption names
    it among rows of one thread each."""
    row = functools.partial(experiments.Row, group="tiny", algo="sac", env="Pendulum-v1",
                            steps=512, eval_every=256, seeds=(1,))  # fmt: skip
    assert runner.shown(row(), 1).startswith("python algos/sac.py ")
    assert runner.shown(row(threads=2), 1).startswith("OMP_NUM_THREADS=2 python ")
    assert runner.shown(row(threads=0), 1).startswith("OMP_NUM_THREADS=$(nproc) python ")
    one, every = {"row": row()}, {"row": row(threads=0, env="BipedalWalker-v3")}
    assert report.threads_caption([one]) == "one torch thread per run. "
    assert report.threads_caption([every]) == "every core of the machine per run. "
    assert "every core, one run at a time: BipedalWalker-v3 sac." in report.threads_caption(
        [one, every]
    )


def test_rows_on_every_core_run_alone_after_the_others(monkeypatch):
    """`--jobs 2` runs rows of a thread two at a time; a row with `threads=0` runs by itself once
    they are done, so it has the machine to itself (its seconds are the row's)."""
    import threading
    import time

    row = functools.partial(experiments.Row, group="tiny", env="Pendulum-v1", steps=512,
                            eval_every=256, seeds=(1, 2))  # fmt: skip
    rows = [row(algo="ppo_vec"), row(algo="sac", threads=0), row(algo="td3", threads=0)]
    monkeypatch.setattr(experiments, "ROWS", experiments.ROWS + rows)
    monkeypatch.setattr(runner, "complete", lambda r, s: False)
    commands = []  # the report: bench/report.py in a fresh process, which reads the table anew
    monkeypatch.setattr(runner, "run_commands", lambda cmds, *a: commands.append(cmds))
    lock, running, log = threading.Lock(), [], []

    def fake_run(r, seed, python, max_seconds=None):
        with lock:
            running.append(r.label)
            log.append((r.label, tuple(running)))
        time.sleep(0.2)
        with lock:
            running.remove(r.label)

    monkeypatch.setattr(runner, "run_one", fake_run)
    runner.main(["tiny", "--jobs", "2"])
    assert [label for label, _ in log[:2]] == ["ppo_vec", "ppo_vec"]
    assert log[1][1] == ("ppo_vec", "ppo_vec")  # the two seeds of a thread each, side by side
    assert [label for label, _ in log[2:]] == ["sac", "td3", "sac", "td3"]
    assert all(len(now) == 1 for _, now in log[2:])  # each alone
    assert commands[0] == [["report.py", "tiny"]]
