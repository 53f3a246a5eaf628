"""`torch.distributed` helpers for torchrun (docs/scaling.md#model-fusion-across-processes).
Without torchrun, or inside `solo()` (population members: each its own run), `init` returns a
single-process `Context` on which every helper does nothing, so algorithm files call them
unconditionally. Only rank 0 (`ctx.is_main`) logs, evaluates and checkpoints."""

from __future__ import annotations

import contextlib
import importlib
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from common.device import resolve_device
from common.errors import UserError

_SOLO = 0  # > 0 inside `solo()`


@dataclass(frozen=True)
class Context:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


@contextlib.contextmanager
def solo():
    """Inside, `init` returns the single-process context whatever torchrun's environment says."""
    global _SOLO
    _SOLO += 1
    try:
        yield
    finally:
        _SOLO -= 1


def init(device: torch.device | str) -> tuple[Context, torch.device]:
    """Join torchrun's process group (NCCL on CUDA, gloo on CPU) if there is one; return the
    context and this rank's device (`cuda:LOCAL_RANK` on CUDA; `device` may be a `--device` str)."""
    if isinstance(device, str):
        device = resolve_device(device)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or _SOLO:
        return Context(), device
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        if local >= torch.cuda.device_count():
            raise RuntimeError(
                f"LOCAL_RANK {local} but only {torch.cuda.device_count()} GPUs here: "
                f"use --nproc-per-node {torch.cuda.device_count()} or fewer"
            )
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        # Import before init_process_group what the first optimizer imports (torch._dynamo ->
        # torch.distributed.nn): imported after, it binds `group.WORLD` as a default argument,
        # keeping the group past destroy_process_group, and gloo's threads outliving the
        # interpreter then now and then abort the process at exit (SIGABRT).
        importlib.import_module("torch._dynamo")

        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Context(rank, world, local), device


def shutdown(ctx: Context) -> None:
    """Leave the process group: its threads end here, not at interpreter exit (see `init`)."""
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()


def norm_stats(env) -> list:
    """The running statistics of `env`'s observation and reward normalizers (to pool)."""
    from common.wrappers import NormalizeObservation, NormalizeReward, find_wrapper

    found = (find_wrapper(env, NormalizeObservation), find_wrapper(env, NormalizeReward))
    return [w.rms for w in found if w is not None]


def _tensors(modules) -> list[torch.Tensor]:
    return [t for m in modules for t in (*m.parameters(), *m.buffers())]


def _average_(tensors: list[torch.Tensor], world: int) -> None:
    """Average float tensors across ranks in place, with one all_reduce over a flat buffer."""
    tensors = [t for t in tensors if t.is_floating_point()]
    if not tensors:
        return
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for t in tensors:
        n = t.numel()
        t.data.copy_(flat[offset : offset + n].view_as(t))
        offset += n


@torch.no_grad()
def broadcast(ctx: Context, modules) -> None:
    """Give every rank rank 0's parameters and buffers."""
    if not ctx.enabled:
        return
    for t in _tensors(modules):
        dist.broadcast(t.data, src=0)


@torch.no_grad()
def fuse(ctx: Context, modules, optimizers=()) -> None:
    """Model fusion: average parameters, buffers and the optimizers' state tensors (Adam's
    moments; the step counts, equal on every rank, are left alone)."""
    if not ctx.enabled:
        return
    state = [
        v
        for opt in optimizers
        for s in opt.state.values()
        for k, v in s.items()
        if torch.is_tensor(v) and k != "step"
    ]
    _average_(_tensors(modules) + state, ctx.world_size)


@torch.no_grad()
def fuse_statistics(ctx: Context, stats) -> None:
    """Pool `RunningMeanStd` statistics across ranks as if one had seen every rank's samples:
    pooled mean and variance (within- plus between-rank); the mean count, so each rank keeps
    weighting new batches as before."""
    if not ctx.enabled:
        return
    for rms in stats:
        if rms is None:
            continue
        w = rms.count.reshape(1)
        packed = torch.cat(
            [w, (w * rms.mean).reshape(-1), (w * (rms.var + rms.mean.square())).reshape(-1)]
        )
        dist.all_reduce(packed)
        total, n = packed[0], rms.mean.numel()
        mean = packed[1 : 1 + n].view_as(rms.mean) / total
        var = (packed[1 + n :].view_as(rms.var) / total - mean.square()).clamp_min(0)
        # in place: a deployable policy (common/policy.py) reads these very tensors
        rms.mean.copy_(mean), rms.var.copy_(var), rms.count.copy_(total / ctx.world_size)


def allreduce_gradients(ctx: Context, modules) -> None:
    """Average gradients across ranks, between backward() and the step (ranks stay identical)."""
    if not ctx.enabled:
        return
    grads = [p.grad for m in modules for p in m.parameters() if p.grad is not None]
    _average_(grads, ctx.world_size)


def all_mean(ctx: Context, x: torch.Tensor) -> torch.Tensor:
    """The mean of `x` over ranks (a new tensor; `x` when single-process), the same on every rank,
    so a decision on it (PPO's `target_kl` stop) is taken by all together. A collective."""
    if not ctx.enabled:
        return x
    y = x.detach().clone()
    dist.all_reduce(y)
    return y / ctx.world_size


def _to_cpu(obj):
    if torch.is_tensor(obj):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def gather_to_main(ctx: Context, obj) -> list | None:
    """Every rank's picklable `obj` as a list by rank on rank 0 (its own entry `obj` itself, the
    others' tensors on the CPU), None elsewhere; `[obj]` single-process. A collective with host
    syncs: call it on every rank at checkpoint ticks only."""
    if not ctx.enabled:
        return [obj]
    out = [None] * ctx.world_size if ctx.is_main else None
    dist.gather_object(None if ctx.is_main else _to_cpu(obj), out, dst=0)
    if ctx.is_main:
        out[0] = obj
    return out


def check_world_size(ckpt: dict, ctx: Context, path: str, script: str) -> None:
    """A checkpoint holding every rank's state resumes with the world size that wrote it, else a
    UserError names the command that does (`script`: the algorithm file)."""
    saved = int(ckpt.get("world_size", 1))
    if saved == ctx.world_size:
        return
    how = (
        f"torchrun --nproc-per-node {saved} {script} --resume {path} (or --nnodes x "
        f"--nproc-per-node = {saved} across nodes)"
        if saved > 1
        else f"python {script} --resume {path} (without torchrun)"
    )
    raise UserError(
        f"{path} was written by {saved} process{'es' if saved > 1 else ''} and this run has "
        f"{ctx.world_size}: a checkpoint holds every rank's environments, RNG and optimizer state, "
        f"so resume it with {saved}: {how}"
    )
