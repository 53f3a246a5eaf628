"""bench/peers.py's measures and table, from a log of runs (no SB3 needed): the time to a stable
solve (the first evaluation after which every one, the final policy's included, is at or above the
threshold), training seconds that exclude the evaluations, a seed whose final policy is below the
threshold counting as never, the first hit beside it, DQN and PQN sharing SB3's DQN run, and our
side getting no training flag (the files' defaults)."""

import json
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import peers  # noqa: E402


def _run(side, algo, seed, evals, mode="full", **kw):
    """a result line: evals = [(step, seconds at its end, eval seconds, return)]"""
    return dict(
        side=side,
        algo=algo,
        seed=seed,
        env="x",
        mode=mode,
        evals=[dict(step=s, seconds=t, eval_seconds=e, eval_return=r) for s, t, e, r in evals],
        **kw,
    )


def test_the_stable_solve_and_the_first_hit():
    # solves at the 2nd evaluation (a spike), falls, solves again at the 4th and stays
    r = _run(
        "ours",
        "ppo",
        1,
        [(1, 1.0, 0.5, 100.0), (2, 2.0, 0.5, 500.0), (3, 3.0, 0.5, 300.0)]
        + [(4, 4.0, 0.5, 480.0), (5, 5.0, 0.5, 475.0)],
    )
    assert peers.first_index(r) == 1 and peers.first_secs(r) == 2.0 - 1.0
    assert peers.stable_index(r) == 3 and peers.stable_secs(r) == 4.0 - 2.0
    assert (
        peers.clock_secs(r, peers.stable_index) == 4.0 and peers.step_at(r, peers.stable_index) == 4
    )
    assert peers.final_return(r) == 475.0 and peers.after_first(r) == (2, 3)
    # the final policy below the threshold: never stably solved, however early the first hit
    late_fall = dict(r, evals=r["evals"][:2] + [dict(r["evals"][2], step=6)])
    assert peers.stable_secs(late_fall) == float("inf") and peers.stable_index(late_fall) is None
    assert peers.first_secs(late_fall) == 1.0 and peers.final_return(late_fall) == 300.0
    # a run stopped at its first hit (--first-hit) has no stable solve and no final policy
    stopped = dict(r, mode="first-hit", evals=r["evals"][:2])
    assert peers.stable_secs(stopped) is None and peers.final_return(stopped) is None
    assert peers.first_secs(stopped) == 1.0
    # every evaluation at or above: stable from the first one
    always = _run("ours", "sac", 1, [(1, 1.0, 0.25, -150.0), (2, 2.0, 0.25, -199.0)])
    assert peers.stable_secs(always) == 0.75 and peers.after_first(always) == (1, 1)


def test_report_from_log(tmp_path):
    rows = [
        # PPO seed 1: SB3 stable at its 2nd eval (10 s clock, 4 s of evals: 6 s of training); ours
        # stable from its 1st (1.5 s clock, 0.5 s eval: 1 s)
        _run(
            "sb3",
            "ppo",
            1,
            [(4096, 5.0, 2.0, 100.0), (8192, 10.0, 2.0, 480.0), (100000, 30.0, 2.0, 500.0)],
            versions=dict(sb3="2.9.2"),
        ),
        _run("ours", "ppo", 1, [(16384, 1.5, 0.5, 500.0), (300000, 9.0, 0.5, 500.0)]),
        # seed 2: ours hits first but ends below the threshold (never stable); SB3 stable at 3 s
        _run("sb3", "ppo", 2, [(4096, 4.0, 1.0, 475.0), (100000, 20.0, 1.0, 490.0)]),
        _run("ours", "ppo", 2, [(16384, 2.0, 0.5, 500.0), (300000, 9.0, 0.5, 100.0)]),
        # seed 3: both stable from their first evaluation
        _run("sb3", "ppo", 3, [(4096, 5.0, 1.0, 490.0), (100000, 20.0, 1.0, 500.0)]),
        _run("ours", "ppo", 3, [(16384, 1.0, 0.5, 500.0), (300000, 9.0, 0.5, 500.0)]),
        # one SB3 DQN run for the dqn and pqn rows
        _run("sb3", "dqn", 1, [(20480, 40.0, 2.0, 500.0), (50000, 60.0, 2.0, 500.0)]),
        _run("ours", "dqn", 1, [(10240, 11.0, 1.0, 500.0), (100000, 50.0, 1.0, 480.0)]),
        _run("ours", "pqn", 1, [(30720, 20.0, 1.0, 480.0), (200000, 50.0, 1.0, 480.0)]),
    ]
    log = tmp_path / "peers.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results, profiles = peers.from_log(log)
    assert list(results) == ["ppo", "dqn", "pqn"] and not profiles
    # stable training seconds: SB3 6, 3, 4 (median 4); ours 1, inf, 0.5 (median 1): ratio 4
    assert peers.ratio_of(results["ppo"]) == 4.0
    # first hits: SB3 6, 3, 4 (median 4); ours 1, 1.5, 0.5 (median 1)
    assert peers.ratio_of(results["ppo"], peers.first_secs) == 4.0
    assert peers.ratio_of(results["dqn"]) == 38.0 / 10.0
    assert peers.ratio_of(results["pqn"]) == 38.0 / 19.0
    text = peers.report(results, profiles, peers.versions_of(results), None)
    ppo_row = next(line for line in text.splitlines() if line.startswith("| PPO CartPole-v1"))
    assert "| 4.0 | 1.0 | 4.0x | >= 5x (missed) |" in ppo_row, ppo_row
    assert "| 3/3 (median 500.0) | 2/3 (median 500.0) |" in ppo_row, ppo_row
    assert "| 100% of 3 | 67% of 3 | 4.0 | 1.0 | 4.0x |" in ppo_row, ppo_row
    assert (
        "| 2 | 100,000 | 4,096: 3.00 (4.00) | 4,096: 3.00 (4.00) | 490.0 | 300,000 | never " in text
    )
    assert "PQN CartPole-v1 >= 475 (SB3 DQN)" in text and "share one SB3 DQN run" in text
    # our side: the env and the evaluation cadence, nothing else
    for algo, c in peers.COMPARISONS.items():
        assert peers.our_flags(algo) == ["--env", c["env"], "--eval-every", str(c["eval_every"])]


def test_from_log_is_a_command(tmp_path):
    log = tmp_path / "peers.jsonl"
    sb3 = _run("sb3", "sac", 1, [(6000, 60.0, 3.0, -150.0), (20000, 90.0, 3.0, -160.0)])
    ours = _run("ours", "sac", 1, [(3000, 6.0, 1.0, -180.0), (20000, 12.0, 1.0, -170.0)])
    log.write_text(json.dumps(sb3) + "\n" + json.dumps(ours) + "\n")
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "peers.py"), "--from-log", str(log)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "| SAC Pendulum-v1 >= -200 | 1 | 57.0 | 5.0 | 11.4x | >= 5x (met) |" in out.stdout, (
        out.stdout
    )


def test_our_worker_trains_the_file_and_stops_at_the_first_hit():
    """The worker process the benchmark starts for our side: the algorithm file with its defaults,
    evaluated in gymnasium; with --first-hit it stops at the first evaluation >= the threshold
    (here any return: the first one)."""
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
            "--first-hit",
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
    assert result["mode"] == "first-hit" and len(result["evals"]) == 1
    assert result["reached"] and result["step"] == result["evals"][0]["step"] > 0
    assert 0 < result["evals"][0]["eval_seconds"] < result["seconds"]


def test_a_side_that_never_solves_stably_reads_never(tmp_path):
    # SB3's final policies fall below the threshold on both seeds; ours holds from its 2nd eval
    rows = [
        _run("sb3", "dqn", s, [(2048, 5.0, 1.0, 500.0), (50000, 50.0, 1.0, 200.0)]) for s in (1, 2)
    ] + [_run("ours", "pqn", s, [(2048, 1.0, 0.5, 100.0), (4096, 2.0, 0.5, 500.0)]) for s in (1, 2)]
    log = tmp_path / "peers.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results, _ = peers.from_log(log)
    assert peers.ratio_of(results["pqn"]) == float("inf")
    text = peers.report(results, {}, {}, None)
    row = next(line for line in text.splitlines() if line.startswith("| PQN CartPole-v1"))
    assert "| never | 1.0 | inf (SB3: never) | >= 5x (met) |" in row, row
    assert "| 0/2 (median 200.0) | 2/2 (median 500.0) |" in row, row


def test_stable_table_of_a_file_beside_the_peers():
    """bench/stable.py: a file outside the peers table is judged by the threshold its runs carry;
    a seed whose final policy is below it is 'never' stable and counts against the finals."""
    import stable

    kw = dict(threshold=-200.0, budget=3)
    held = _run("ours", "redq", 11, [(1, 1.0, 0.5, -300.0), (2, 2.0, 0.5, -150.0)], **kw)
    late = [(1, 1.0, 0.5, -150.0), (2, 2.0, 0.5, -250.0), (3, 3.0, 0.5, -190.0)]
    fell = _run("ours", "redq", 12, late, **kw)
    last = _run("ours", "redq", 13, late[:2], **kw)
    row = stable.row("redq", [last, fell, held])
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "11, 12, 13"
    assert cells[3] == "2/3 (-150.0, -190.0, -250.0)"
    assert cells[4] == "2, 3, never"  # stable at (env steps), per seed
    assert cells[6] == "33% of 3"  # after the first hit: 0/0, 1/2, 0/1
    assert cells[7] == "2, 1, 1"
