"""bench/suite.py: the report reads saved metrics only and states what it measured (final eval mean +-
std over seeds, time to solve, references), and its curves are drawn; the group definitions are
runnable commands of the algorithm files."""

import json
import sys

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import suite  # noqa: E402


def _write_run(path, evals):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for step, secs, ret in evals:
            f.write(json.dumps({"step": step, "seconds": secs, "sps": 1.0, "return": ret - 1}) + "\n")  # a log tick
            f.write(json.dumps({"step": step, "seconds": secs, "sps": 1.0, "eval_return": ret}) + "\n")


@pytest.fixture
def fake_group(tmp_path, monkeypatch):
    monkeypatch.setattr(suite, "results_dir", lambda group: tmp_path / group)
    exps = [suite.Experiment("ppo_vec", "CartPole-v1", 300, 100, solved=475),
            suite.Experiment("dqn", "CartPole-v1", 300, 100, solved=475)]
    monkeypatch.setitem(suite.GROUPS, "fake", dict(seeds=[1, 2], about="test", experiments=exps))
    runs = tmp_path / "fake" / "runs"
    _write_run(runs / "CartPole-v1__ppo_vec__s1.jsonl", [(100, 1.0, 100.0), (200, 2.0, 480.0), (300, 3.0, 500.0)])
    _write_run(runs / "CartPole-v1__ppo_vec__s2.jsonl", [(100, 2.0, 90.0), (200, 4.0, 300.0), (300, 6.0, 490.0)])
    _write_run(runs / "CartPole-v1__dqn__s1.jsonl", [(100, 5.0, 20.0), (200, 9.0, 30.0), (300, 13.0, 40.0)])
    # dqn seed 2 missing: the report uses the seeds it has and says how many
    return tmp_path / "fake"


def test_report_table_and_curves(fake_group):
    text = suite.report("fake")
    row = next(line for line in text.splitlines() if line.startswith("| CartPole-v1 | ppo_vec"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "300"
    assert cells[3] == f"{np.mean([500, 490]):.1f} +- {np.std([500, 490]):.1f}"
    assert cells[4] == "500.0, 490.0"
    assert cells[5] == f"{np.mean([3.0, 6.0]):.0f}"
    assert cells[6].startswith(f"{np.mean([2.0, 6.0]):.0f} s (2/2 >= 475)")
    assert "RL Zoo: 500.0 +- 0.0 (100k)" in cells[7]
    dqn = next(line for line in text.splitlines() if line.startswith("| CartPole-v1 | dqn"))
    assert "40.0 +- 0.0" in dqn and "not reached" in dqn
    assert "mean return over 10 episodes" in text and "RL Baselines3 Zoo" in text
    png = fake_group / "fake_CartPole-v1.png"
    assert png.is_file() and png.stat().st_size > 10_000
    assert (fake_group / "fake.md").read_text() == text


def test_report_without_metrics_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setattr(suite, "results_dir", lambda group: tmp_path / group)
    with pytest.raises(SystemExit, match="bench/suite.py run quick"):
        suite.report("quick")


@pytest.mark.parametrize("group", sorted(suite.GROUPS))
def test_group_commands_parse(group):
    """Every experiment's flags exist in its algorithm file (tyro parses the command)."""
    import importlib

    from common.cli import cli

    for exp in suite.GROUPS[group]["experiments"]:
        module = importlib.import_module(f"algos.{exp.algo}")
        argv = exp.command(1, "runs", "python")[2:]
        args = cli(module.Args, argv=argv, defaults_for=getattr(module, "default_args", None))
        assert args.env == exp.env and args.total_steps == exp.steps
