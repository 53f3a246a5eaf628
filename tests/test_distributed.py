"""Multi-process helpers (`common/distributed.py`) on gloo with 2 CPU processes, and
`torchrun --nproc-per-node 2 algos/ppo_vec.py` end to end."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from common import distributed
from conftest import ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    ctx, device = distributed.init(torch.device("cpu"))
    assert ctx.enabled and ctx.rank == rank and device.type == "cpu"
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
    torch.save({"before": before, "grads": grads, "mean_grads": mean_grads, "moments": moments, "fused": fused,
                "fused_moments": fused_moments, "broadcast": [p.detach() for p in other.parameters()]},
               f"{out}/rank{rank}.pt")
    distributed.shutdown(ctx)


def test_fusion_helpers_average_across_ranks(tmp_path):
    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    for a, b, m0, m1 in zip(r0["grads"], r1["grads"], r0["mean_grads"], r1["mean_grads"]):
        assert torch.allclose(m0, (a + b) / 2) and torch.equal(m0, m1)
    for a, b, f0, f1 in zip(r0["moments"], r1["moments"], r0["fused_moments"], r1["fused_moments"]):
        assert torch.allclose(f0, (a + b) / 2) and torch.equal(f0, f1)  # Adam moments fused too
    for f0, f1 in zip(r0["fused"], r1["fused"]):
        assert torch.equal(f0, f1)
    for b0, b1 in zip(r0["broadcast"], r1["broadcast"]):
        assert torch.equal(b0, b1)
    assert not dist.is_initialized()


def test_single_process_context_is_a_no_op():
    ctx, device = distributed.init(torch.device("cpu"))
    assert not ctx.enabled and ctx.is_main and device == torch.device("cpu")
    net = torch.nn.Linear(2, 2)
    w = net.weight.detach().clone()
    distributed.fuse(ctx, [net])
    distributed.broadcast(ctx, [net])
    assert torch.equal(w, net.weight)


@pytest.mark.parametrize("fuse_every", [1, 0], ids=["fusion", "gradient-allreduce"])
def test_torchrun_ppo_learns_cartpole(fuse_every, tmp_path):
    """Two learners, one process each, on CPU: the fused (or gradient-averaged) policy learns."""
    script = (
        "import json, sys; sys.path.insert(0, '.');"
        "from algos import ppo_vec;"
        f"r = ppo_vec.main(ppo_vec.Args(env='CartPole-v1', num_envs=512, total_steps=700_000, eval_every=0,"
        f" save_every=0, quiet=True, fuse_every={fuse_every}, out_dir={str(tmp_path)!r}));"
        "print('RESULT', json.dumps(r))"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--master-port", str(_free_port()), "--no-python", sys.executable,
                          "-c", script], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    results = [json.loads(line.split("RESULT", 1)[1]) for line in out.stdout.splitlines() if "RESULT" in line]
    assert len(results) == 2
    main = [r for r in results if r["run_dir"] != "None"]
    assert len(main) == 1, "only rank 0 writes a run directory"
    assert main[0]["steps"] >= 600_000
    assert main[0]["eval_return"] >= 400, main[0]
    assert len(list(tmp_path.iterdir())) == 1
