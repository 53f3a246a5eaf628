"""bench/peers.py's table, from a log of runs (no SB3 needed): training seconds exclude the
evaluations inside the clock, a seed that never reached counts as infinitely slow, DQN and PQN share
SB3's DQN run, and our side gets no training flag (the files' defaults)."""

import json
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import peers  # noqa: E402


def _run(side, algo, seed, step, seconds, evals, **kw):
    """a result line: evals = [(step, seconds at its end, eval seconds, return)]"""
    return dict(
        side=side,
        algo=algo,
        seed=seed,
        env="x",
        reached=step is not None,
        step=step,
        seconds=seconds,
        evals=[dict(step=s, seconds=t, eval_seconds=e, eval_return=r) for s, t, e, r in evals],
        **kw,
    )


def test_report_from_log(tmp_path):
    rows = [
        # PPO seed 1: SB3 10 s with 4 s of evals (6 s training); ours 1.5 s with 0.5 s of evals (1 s
        # training)
        _run(
            "sb3",
            "ppo",
            1,
            8192,
            10.0,
            [(4096, 5.0, 2.0, 100.0), (8192, 10.0, 2.0, 480.0)],
            versions=dict(sb3="2.9.2"),
        ),
        _run("ours", "ppo", 1, 16384, 1.5, [(16384, 1.5, 0.5, 500.0)], budget=1_000_000),
        # seed 2: ours never reached (its evals all below), SB3 did
        _run("sb3", "ppo", 2, 4096, 4.0, [(4096, 4.0, 1.0, 475.0)]),
        _run("ours", "ppo", 2, None, None, [(16384, 2.0, 0.5, 100.0)], budget=1_000_000),
        # seed 3: both reached
        _run("sb3", "ppo", 3, 4096, 5.0, [(4096, 5.0, 1.0, 490.0)]),
        _run("ours", "ppo", 3, 16384, 1.0, [(16384, 1.0, 0.5, 500.0)], budget=1_000_000),
        # one SB3 DQN run for the dqn and pqn rows
        _run("sb3", "dqn", 1, 20480, 40.0, [(20480, 40.0, 2.0, 500.0)]),
        _run("ours", "dqn", 1, 10240, 11.0, [(10240, 11.0, 1.0, 500.0)], budget=100_000),
        _run("ours", "pqn", 1, 30720, 20.0, [(30720, 20.0, 1.0, 480.0)], budget=200_000),
    ]
    log = tmp_path / "peers.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results, profiles = peers.from_log(log)
    assert list(results) == ["ppo", "dqn", "pqn"] and not profiles
    # training seconds: SB3 6, 3, 4 (median 4); ours 1, inf, 0.5 (median 1): ratio 4
    assert peers.ratio_of(results["ppo"]) == 4.0
    assert peers.ratio_of(results["ppo"], peers.clock_secs) == 5.0 / 1.5
    assert (
        peers.ratio_of(results["dqn"]) == 38.0 / 10.0
        and peers.ratio_of(results["pqn"]) == 38.0 / 19.0
    )
    text = peers.report(results, profiles, peers.versions_of(results), None)
    ppo_row = next(line for line in text.splitlines() if line.startswith("| PPO CartPole-v1"))
    assert "| 4.0x |" in ppo_row and ">= 10x (missed)" in ppo_row and "2/3 reached" in ppo_row, (
        ppo_row
    )
    assert (
        "| 2 | 4,096 | 1 (1.00) | 3.00 | 4.00 | n/a | 1 (never) | n/a | n/a | n/a | n/a |" in text
    )
    assert "PQN CartPole-v1 >= 475 (SB3 DQN)" in text and "share one SB3 DQN run" in text
    # our side: the env and the evaluation cadence, nothing else
    for algo, c in peers.COMPARISONS.items():
        assert peers.our_flags(algo) == ["--env", c["env"], "--eval-every", str(c["eval_every"])]


def test_from_log_is_a_command(tmp_path):
    log = tmp_path / "peers.jsonl"
    log.write_text(
        json.dumps(_run("sb3", "sac", 1, 6000, 60.0, [(6000, 60.0, 3.0, -150.0)]))
        + "\n"
        + json.dumps(_run("ours", "sac", 1, 3000, 6.0, [(3000, 6.0, 1.0, -180.0)], budget=40_000))
        + "\n"
    )
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "peers.py"), "--from-log", str(log)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "| SAC Pendulum-v1 >= -200 | 1 | 57.0 | 5.0 | 11.4x | >= 10x (met) |" in out.stdout, (
        out.stdout
    )


def test_our_worker_trains_the_file_and_stops_at_the_threshold():
    """The worker process the benchmark starts for our side: the algorithm file with its defaults,
    evaluated in gymnasium, stopped at the first evaluation >= the threshold (here any return: the
    first one)."""
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "peers.py"),
            "--worker",
            "ppo",
            "--seed",
            "1",
            "--threshold",
            "0",
            "--",
            *peers.our_flags("ppo"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(
        next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:]
    )
    assert (
        result["reached"]
        and len(result["evals"]) == 1
        and result["step"] == result["evals"][0]["step"] > 0
    )
    assert 0 < result["evals"][0]["eval_seconds"] < result["seconds"]
