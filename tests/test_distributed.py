"""Multi-process helpers (`common/distributed.py`) on gloo with 2 CPU processes, and
`torchrun --nproc-per-node 2 algos/ppo_podracer.py` end to end: learning, and exact resume."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from common import distributed
from common.wrappers import RunningMeanStd
from conftest import (
    ROOT,
    assert_solved_and_stays,
    assert_same as _assert_same,
    free_port as _free_port,
)


def _concat_problem():
    """A small MLP (same weights everywhere) and a 16-sample regression batch, in float64."""
    g = torch.Generator().manual_seed(3)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)
    ).double()
    with torch.no_grad():
        for p in mlp.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    return (
        mlp,
        torch.randn(16, 3, generator=g, dtype=torch.float64),
        torch.randn(16, 2, generator=g, dtype=torch.float64),
    )


def _fusion_part(ctx, rank: int, out: str) -> None:
    torch.manual_seed(rank)  # different weights on each rank
    net = torch.nn.Linear(3, 2)
    before = [p.detach().clone() for p in net.parameters()]
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    net(torch.randn(4, 3)).square().sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    distributed.allreduce_gradients(ctx, [net])
    mean_grads = [p.grad.clone() for p in net.parameters()]
    opt.step()
    moments = [opt.state[p]["exp_avg"].clone() for p in net.parameters()]
    distributed.fuse(ctx, [net], [opt])
    fused = [p.detach().clone() for p in net.parameters()]
    fused_moments = [opt.state[p]["exp_avg"].clone() for p in net.parameters()]
    torch.manual_seed(100 + rank)
    other = torch.nn.Linear(3, 2)
    distributed.broadcast(ctx, [other])
    # data parallel: same weights, each rank half of one batch; the all-reduced gradient of the
    # per-rank mean loss is compared (in the test) with one process's gradient on the whole batch
    mlp, x, y = _concat_problem()
    half = slice(rank * 8, rank * 8 + 8)
    torch.nn.functional.mse_loss(mlp(x[half]), y[half]).backward()
    distributed.allreduce_gradients(ctx, [mlp])
    torch.save(
        {
            "before": before,
            "grads": grads,
            "mean_grads": mean_grads,
            "moments": moments,
            "fused": fused,
            "fused_moments": fused_moments,
            "broadcast": [p.detach() for p in other.parameters()],
            "dp_grads": [p.grad.clone() for p in mlp.parameters()],
        },
        f"{out}/rank{rank}.pt",
    )


@pytest.mark.xdist_group("gloo")
def test_fusion_helpers_average_across_ranks(gloo_run):
    r0, r1 = (torch.load(gloo_run / f"rank{r}.pt") for r in (0, 1))
    for a, b, m0, m1 in zip(r0["grads"], r1["grads"], r0["mean_grads"], r1["mean_grads"]):
        assert torch.allclose(m0, (a + b) / 2) and torch.equal(m0, m1)
    for a, b, f0, f1 in zip(r0["moments"], r1["moments"], r0["fused_moments"], r1["fused_moments"]):
        assert torch.allclose(f0, (a + b) / 2) and torch.equal(f0, f1)  # Adam moments fused too
    for f0, f1 in zip(r0["fused"], r1["fused"]):
        assert torch.equal(f0, f1)
    for b0, b1 in zip(r0["broadcast"], r1["broadcast"]):
        assert torch.equal(b0, b1)
    mlp, x, y = _concat_problem()  # one process, the concatenated batch
    torch.nn.functional.mse_loss(mlp(x), y).backward()
    for g0, g1, full in zip(r0["dp_grads"], r1["dp_grads"], (p.grad for p in mlp.parameters())):
        assert torch.equal(g0, g1)
        torch.testing.assert_close(g0, full, rtol=1e-12, atol=1e-14)
    assert not dist.is_initialized()


# each rank's samples for the normalizer test: shape (3,) observations and scalar returns, unequal
# counts too
_SAMPLES = {"equal": (40, 40), "unequal": (10, 70)}


def _samples(name: str, rank: int):
    g = torch.Generator().manual_seed(7)
    n0, n1 = _SAMPLES[name]
    obs = torch.randn(n0 + n1, 3, generator=g, dtype=torch.float64) * torch.tensor(
        [1.0, 3.0, 0.1], dtype=torch.float64
    )
    ret = torch.randn(n0 + n1, generator=g, dtype=torch.float64) * 5 + 2
    # the ranks see different distributions: the pooled variance has a between-rank part
    obs[n0:] += 4.0
    ret[n0:] -= 3.0
    part = slice(0, n0) if rank == 0 else slice(n0, n0 + n1)
    return obs[part], ret[part]


def _stats_part(ctx, rank: int, out: str) -> None:
    result = {}
    for name in _SAMPLES:
        obs, ret = _samples(name, rank)
        obs_rms, ret_rms = RunningMeanStd((3,), epsilon=0.0), RunningMeanStd((), epsilon=0.0)
        for chunk in obs.split(16):  # several batches, as a normalizer sees them during a rollout
            obs_rms.update(chunk)
        ret_rms.update(ret)
        # None (a disabled normalizer) is skipped
        distributed.fuse_statistics(ctx, [obs_rms, None, ret_rms])
        result[name] = {"obs": obs_rms.state_dict(), "ret": ret_rms.state_dict()}
    # the other helpers a checkpoint / early stop under torchrun uses
    result["mean"] = distributed.all_mean(ctx, torch.tensor([1.0 + rank, 10.0 * rank]))
    gathered = distributed.gather_to_main(
        ctx, {"rank": rank, "x": torch.full((2,), float(rank)), "t": (rank, [rank])}
    )
    result["gathered"] = gathered
    torch.save(result, f"{out}/stats{rank}.pt")


def _gloo_worker(rank: int, port: int, out: str) -> None:
    """One rank of the 2-process gloo group every helper test below reads from (one spawn: starting
    the two processes costs more than everything they compute)."""
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    ctx, device = distributed.init(torch.device("cpu"))
    assert ctx.enabled and ctx.rank == rank and device.type == "cpu"
    _fusion_part(ctx, rank, out)
    _stats_part(ctx, rank, out)
    distributed.shutdown(ctx)


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gloo")
    # fork: the ranks start from this process (spawn re-imported torch in each, ~3 s apiece on a
    # slow host)
    mp.start_processes(
        _gloo_worker, args=(_free_port(), str(out)), nprocs=2, join=True, start_method="fork"
    )
    return out


@pytest.fixture(scope="module")
def stats_run(gloo_run):
    return [torch.load(gloo_run / f"stats{r}.pt", weights_only=False) for r in (0, 1)]


@pytest.mark.xdist_group("gloo")
@pytest.mark.parametrize("name", list(_SAMPLES))
def test_fuse_statistics_pools_like_concatenated_samples(name, stats_run):
    """Pooled mean/var are those of every rank's samples put together; both ranks hold the same."""
    r0, r1 = stats_run[0][name], stats_run[1][name]
    for key in ("obs", "ret"):
        for field in ("mean", "var", "count"):
            assert torch.equal(r0[key][field], r1[key][field]), (
                f"{key}.{field} differs between ranks"
            )
    (o0, t0), (o1, t1) = _samples(name, 0), _samples(name, 1)
    obs, ret = torch.cat([o0, o1]), torch.cat([t0, t1])
    torch.testing.assert_close(r0["obs"]["mean"], obs.mean(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(r0["obs"]["var"], obs.var(0, unbiased=False), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(r0["ret"]["mean"], ret.mean(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(r0["ret"]["var"], ret.var(unbiased=False), rtol=1e-12, atol=1e-12)
    # the count is the ranks' mean count: each rank goes on weighting its new batches as before
    assert r0["obs"]["count"].item() == pytest.approx(len(obs) / 2)


@pytest.mark.xdist_group("gloo")
def test_all_mean_and_gather_to_main(stats_run):
    r0, r1 = stats_run
    assert torch.equal(r0["mean"], torch.tensor([1.5, 5.0])) and torch.equal(r0["mean"], r1["mean"])
    assert r1["gathered"] is None
    g = r0["gathered"]
    assert [e["rank"] for e in g] == [0, 1] and [e["t"] for e in g] == [(0, [0]), (1, [1])]
    assert torch.equal(g[1]["x"], torch.ones(2)) and g[1]["x"].device.type == "cpu"


def test_single_process_context_is_a_no_op():
    ctx, device = distributed.init(torch.device("cpu"))
    assert not ctx.enabled and ctx.is_main and device == torch.device("cpu")
    net = torch.nn.Linear(2, 2)
    w = net.weight.detach().clone()
    distributed.fuse(ctx, [net])
    distributed.broadcast(ctx, [net])
    assert torch.equal(w, net.weight)


@pytest.mark.slow
@pytest.mark.parametrize("fuse_every", [1, 0], ids=["fusion", "gradient-allreduce"])
def test_torchrun_ppo_learns_cartpole(fuse_every, tmp_path):
    """Two learners, one process each, on CPU, with the file's CartPole-v1 row (`torchrun
    --nproc-per-node 2 algos/ppo_podracer.py --env CartPole-v1`): the fused (or gradient-averaged)
    policy is solved for good by 160k of its 300k steps: every evaluation from one at or before it
    on, the final policy's included (evaluations every 20k steps; `assert_solved_and_stays`)."""
    script = (
        "import json, sys; from dataclasses import replace; sys.path.insert(0, '.');"
        "from algos import ppo_podracer;"
        "a = replace(ppo_podracer.default_args('CartPole-v1'), eval_every=20_000, save_every=0,"
        f" quiet=True, fuse_every={fuse_every}, out_dir={str(tmp_path)!r});"
        "r = ppo_podracer.main(a);"
        # one write: the ranks share the pipe
        "sys.stdout.write('RESULT ' + json.dumps(r) + chr(10))"
    )
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
            "--no-python",
            sys.executable,
            "-c",
            script,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:] + "\n--- stdout ---\n" + out.stdout[-1500:]
    results = [
        json.loads(line.split("RESULT", 1)[1])
        for line in out.stdout.splitlines()
        if "RESULT" in line
    ]
    assert len(results) == 2
    main = [r for r in results if r["run_dir"] != "None"]
    assert len(main) == 1, "only rank 0 writes a run directory"
    assert main[0]["steps"] == 299_520  # the row's 300k steps, both ranks' together
    assert_solved_and_stays(main[0], 475, by=160_000)
    assert len(list(tmp_path.iterdir())) == 1


# ---- resume under torchrun -----------------------------------------------------------------------
# 8 envs x 40 steps x 2 ranks = 640 steps an iteration; 6 iterations, a checkpoint after the 3rd;
# Pendulum's 200-step time limit falls after it. Three epochs of 2 minibatches (fewer on an early
# stop at the ranks' mean KL); with --fuse-every 3 the checkpoint falls between fusions, where the
# ranks' models differ.
ITER = 8 * 40 * 2
RESUME = dict(
    env="Pendulum-v1",
    num_envs=8,
    num_steps=40,
    num_minibatches=2,
    update_epochs=3,
    total_steps=ITER * 6,
    save_every=ITER * 3,
    eval_every=0,
    eval_episodes=2,
    norm_obs=True,
    norm_reward=True,
    target_kl=0.001,
    quiet=True,
)

# rank 0 keeps a copy of every checkpoint it writes (each overwrites the previous one)
_SNAPSHOT_SCRIPT = """
import json, shutil, sys
sys.path.insert(0, '.')
import common.run
from algos import ppo_podracer
save = common.run.save_checkpoint  # the run shell writes the checkpoints
def keep(path, payload):
    out = save(path, payload)
    shutil.copy(path, path.parent / f"snap{len(list(path.parent.glob('snap*.pt')))}.pt")
    return out
common.run.save_checkpoint = keep
out = ppo_podracer.main(ppo_podracer.Args(**json.loads(sys.argv[1])))
import os  # the process group's threads (gloo's) must be gone once main has returned: \
see common.distributed.init
out["threads_after_main"] = sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in \
os.listdir("/proc/self/task"))
sys.stdout.write('RESULT ' + json.dumps(out) + '\\n')  # one write: the ranks share one pipe
"""


def _torchrun_ppo(kw: dict, nproc: int = 2):
    """`torchrun --nproc-per-node nproc` of ppo_podracer.main(Args(**kw)): (completed process, rank
    0's result)."""
    # a crash prints its Python stack
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            str(nproc),
            "--master-port",
            str(_free_port()),
            "--no-python",
            sys.executable,
            "-c",
            _SNAPSHOT_SCRIPT,
            json.dumps(kw),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    results = [
        json.loads(line.split("RESULT", 1)[1])
        for line in out.stdout.splitlines()
        if "RESULT" in line
    ]
    main = [r for r in results if r["run_dir"] != "None"]
    if main:
        main[0]["threads_after_main_by_rank"] = [r["threads_after_main"] for r in results]
    return out, (main[0] if main else None)


@pytest.fixture(scope="module")
def torchrun_full(tmp_path_factory):
    """The uninterrupted 2-process run of one mode (run once per module, shared by the tests
    below)."""
    runs = {}

    def run(fuse_every: int):
        if fuse_every not in runs:
            out_dir = tmp_path_factory.mktemp(f"full{fuse_every}")
            out, res = _torchrun_ppo(dict(RESUME, fuse_every=fuse_every, out_dir=str(out_dir)))
            assert out.returncode == 0, out.stderr[-3000:]
            snaps = sorted(Path(res["run_dir"]).glob("snap*.pt"), key=lambda p: int(p.stem[4:]))
            runs[fuse_every] = res, snaps
        return runs[fuse_every]

    return run


@pytest.mark.slow
@pytest.mark.xdist_group("torchrun_resume")
@pytest.mark.parametrize("fuse_every", [3, 0], ids=["fusion", "gradient-allreduce"])
def test_the_process_group_ends_when_main_returns(fuse_every, torchrun_full):
    """No gloo thread is left once main() has returned on any rank. A thread left running ends only
    at interpreter exit, where freeing a collective's tensors needs the GIL of a finalizing
    interpreter: SIGABRT in ~4% of runs (the old torchrun teardown flake). Deterministic here: the
    threads are either gone or not."""
    full, _ = torchrun_full(fuse_every)
    by_rank = full["threads_after_main_by_rank"]
    assert len(by_rank) == 2 and not any("gloo" in t for threads in by_rank for t in threads), (
        by_rank
    )


@pytest.mark.slow
@pytest.mark.xdist_group("torchrun_resume")
@pytest.mark.parametrize("fuse_every", [3, 0], ids=["fusion", "gradient-allreduce"])
def test_torchrun_resume_continues_exactly(fuse_every, torchrun_full, tmp_path):
    """Two processes, interrupted after the 3rd of 6 iterations and resumed under torchrun: the end
    state of every rank (model, Adam, envs with their normalizers, next observations, RNG) is
    bit-identical to the uninterrupted run's, with pooled normalizers and an early stop at the
    ranks' mean KL on the way."""
    full, snaps = torchrun_full(fuse_every)
    assert len(snaps) == 2, snaps
    mid = torch.load(snaps[0], weights_only=False)
    assert mid["world_size"] == 2 and len(mid["ranks"]) == 2 and mid["global_step"] == ITER * 3
    r0, r1 = mid["ranks"]
    assert not torch.equal(r0["next_obs"]["policy"], r1["next_obs"]["policy"]), (
        "each rank steps its own envs"
    )
    assert not torch.equal(r0["rng"]["torch"], r1["rng"]["torch"])
    assert mid["updates"] < 3 * 6, (
        "no early stop at --target-kl before the checkpoint: lower RESUME's target_kl"
    )
    if fuse_every:  # between fusions: the ranks' learners differ, the checkpoint holds both
        assert mid["updates"] % fuse_every, (
            "the checkpoint should fall between fusions: change RESUME"
        )
        assert any(not torch.equal(r0["model"][k], r1["model"][k]) for k in r0["model"])
    else:  # gradient averaging keeps the learners identical
        _assert_same(r0["model"], r1["model"], "model")

    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copy(snaps[0], resumed_dir / "checkpoint.pt")
    out, resumed = _torchrun_ppo(
        dict(
            RESUME,
            fuse_every=fuse_every,
            resume=str(resumed_dir / "checkpoint.pt"),
            out_dir=str(tmp_path / "unused"),
        )
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert resumed["steps"] == full["steps"] == ITER * 6
    a = torch.load(full["checkpoint"], weights_only=False)
    b = torch.load(resumed["checkpoint"], weights_only=False)
    for key in (
        "model",
        "optimizer",
        "policy",
        "next_obs",
        "iteration",
        "global_step",
        "updates",
        "world_size",
        "ranks",
    ):
        _assert_same(a[key], b[key], key)
    for k in ("env", "rng"):  # the top-level fields are rank 0's
        _assert_same(a[k], a["ranks"][0][k], k)
    # every rank normalizes alike: statistics pooled after every rollout (gradient mode) or at the
    # first fusion after it (fusion mode: an iteration that ends early at the KL may have none)
    pooled = [
        all(
            torch.equal(
                ck["ranks"][0]["env"]["own"]["rms"][s], ck["ranks"][1]["env"]["own"]["rms"][s]
            )
            # NormalizeObservation's
            and torch.equal(
                ck["ranks"][0]["env"]["inner"]["own"]["rms"][s],
                ck["ranks"][1]["env"]["inner"]["own"]["rms"][s],
            )
            for s in ("mean", "var", "count")
        )
        for ck in (mid, a)
    ]
    assert all(pooled) if not fuse_every else any(pooled), pooled
    # the deployable policy normalizes with rank 0's (pooled) statistics
    assert torch.equal(a["policy"]["obs_mean"], a["ranks"][0]["env"]["inner"]["own"]["rms"]["mean"])
    assert resumed["eval_return"] == full["eval_return"]


@pytest.mark.slow
@pytest.mark.xdist_group("torchrun_resume")
def test_resume_with_another_world_size_is_refused(torchrun_full, tmp_path):
    from algos import ppo_podracer

    _, snaps = torchrun_full(3)
    with pytest.raises(
        ValueError, match=r"written by 2 processes and this run has 1.*torchrun --nproc-per-node 2"
    ):
        ppo_podracer.main(ppo_podracer.Args(resume=str(snaps[0]), quiet=True))
    # a single-process checkpoint under torchrun (the check every rank makes before anything else)
    single = ppo_podracer.main(
        ppo_podracer.Args(
            out_dir=str(tmp_path),
            env="CartPole-v1",
            num_envs=8,
            num_steps=8,
            num_minibatches=2,
            total_steps=64,
            eval_every=0,
            eval_episodes=1,
            quiet=True,
        )
    )
    ckpt = torch.load(single["checkpoint"], weights_only=False)
    assert ckpt["world_size"] == 1 and "ranks" not in ckpt
    with pytest.raises(
        ValueError, match=r"written by 1 process and this run has 3.*without torchrun"
    ):
        distributed.check_world_size(
            ckpt,
            distributed.Context(rank=1, world_size=3),
            single["checkpoint"],
            "algos/ppo_podracer.py",
        )
    distributed.check_world_size(
        {k: v for k, v in ckpt.items() if k != "world_size"},
        distributed.Context(),
        # older single-process checkpoints: world size 1
        "old.pt",
        "algos/ppo_podracer.py",
    )
