"""Multi-process SAC: `torchrun --nproc-per-node 2 algos/sac_podracer.py` on 2 CPU (gloo) processes,
each with its own envs and replay buffer. With model fusion the fused policy learns Pendulum-v1 and,
after the final fusion, both ranks hold the same actor; with gradient all-reduce the ranks never
part."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from algos import sac_podracer
from conftest import ROOT, assert_solved_and_stays, free_port as _free_port

pytestmark = pytest.mark.slow  # every test here runs torchrun

# each rank saves its final actor and env state (normalizer included) to $STATES/rank<RANK>.pt,
# recording the Actor and the env that main builds
SCRIPT = """
import json, os, sys
sys.path.insert(0, '.')
import torch
from algos import sac_podracer as sac
actors, envs = [], []
class Actor(sac.Actor):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        actors.append(self)
make_env = sac.make_env
sac.Actor, sac.make_env = Actor, lambda *a, **k: envs.append(make_env(*a, **k)) or envs[-1]
r = sac.main(sac.Args(**json.loads(sys.argv[1])))
torch.save({"actor": actors[0].state_dict(), "env": envs[0].state_dict()},
           os.path.join(os.environ['STATES'], f"rank{os.environ['RANK']}.pt"))
sys.stdout.write('RESULT ' + json.dumps(r) + '\\n')  # one write: the ranks share one pipe
"""


def _torchrun_sac(tmp_path, **kw) -> tuple[list[dict], list[dict]]:
    """Run SAC on 2 gloo processes; returns both ranks' summaries and final actor and env states."""
    states = tmp_path / "states"
    states.mkdir()
    run = dict(env="Pendulum-v1", eval_every=0, save_every=0, quiet=True)
    args = {**run, "out_dir": str(tmp_path / "runs"), **kw}  # kw may set eval_every
    env = dict(os.environ, OMP_NUM_THREADS="1", STATES=str(states))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(_free_port()),
            "--no-python",
            sys.executable,
            "-c",
            SCRIPT,
            json.dumps(args),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    results = [
        json.loads(line.split("RESULT", 1)[1])
        for line in out.stdout.splitlines()
        if "RESULT" in line
    ]
    assert len(results) == 2
    return results, [torch.load(states / f"rank{r}.pt") for r in (0, 1)]


def test_torchrun_sac_learns_pendulum_with_fusion(tmp_path):
    """The file's Pendulum-v1 row (4 envs a rank, 4 updates per vectorized step, 64x64) on each
    rank, fused after every update, 12k env steps in all, evaluated every 2k: solved (-200) for good
    by 6k, at every evaluation from there on (the stable solve; seeds 1-3 under torchrun held from
    4k)."""
    row = {**sac_podracer.TASK_DEFAULTS["Pendulum-v1"], "total_steps": 12_000, "eval_every": 2_000}
    results, (s0, s1) = _torchrun_sac(tmp_path, seed=1, **row)
    main = [r for r in results if r["run_dir"] != "None"]
    assert len(main) == 1, "only rank 0 writes a run directory"
    assert len(list((tmp_path / "runs").iterdir())) == 1
    assert main[0]["steps"] == 12_000  # --total-steps counts both ranks
    print(main[0])
    assert_solved_and_stays(main[0], -200, by=6_000)
    assert all(torch.equal(s0["actor"][k], s1["actor"][k]) for k in s0["actor"]), (
        "the ranks' actors differ after the final fusion"
    )
    # own envs
    assert not torch.equal(
        s0["env"]["inner"]["inner"]["state"], s1["env"]["inner"]["inner"]["state"]
    )


@pytest.mark.parametrize("pipeline", [False, True], ids=["plain", "pipeline"])
def test_torchrun_sac_gradient_allreduce_keeps_ranks_identical(pipeline, tmp_path):
    """--fuse-every 0: the gradients are averaged before every step, so the ranks (which sample
    different data) stay identical without any parameter averaging; --norm-obs pools statistics."""
    kw = dict(
        seed=3,
        num_envs=2,
        hidden=(32, 32),
        batch_size=32,
        total_steps=2 * 2 * 100,
        learning_starts=100,
        fuse_every=0,
        norm_obs=True,
        eval_episodes=2,
        pipeline=pipeline,
        pipeline_segment=4,
    )
    results, (s0, s1) = _torchrun_sac(tmp_path, **kw)
    assert all(torch.equal(s0["actor"][k], s1["actor"][k]) for k in s0["actor"])
    ck = torch.load(
        [r for r in results if r["run_dir"] != "None"][0]["checkpoint"], weights_only=False
    )
    assert ck["updates"] > 0
    # NormalizeObservation, the outermost wrapper
    rms0, rms1 = s0["env"]["own"]["rms"], s1["env"]["own"]["rms"]
    assert all(torch.equal(rms0[k], rms1[k]) for k in rms0), (
        "observation statistics are pooled across ranks"
    )


def test_torchrun_sac_refuses_resume(tmp_path):
    # a crash prints its Python stack
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(_free_port()),
            "algos/sac_podracer.py",
            "--resume",
            str(tmp_path / "x.pt"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode != 0 and "--resume is a single-process option" in out.stderr
