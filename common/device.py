"""Where a run computes and how it is seeded: the device (`--device auto`), its CPU threads
(`--threads auto`), `--compile` for that device, seeds, and the host RNG states a checkpoint saves
and a resume restores."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from common.errors import UserError


def canonical(device) -> torch.device:
    """`device` as the tensors made on it report it: "cuda" -> cuda:<current>
    (`torch.device("cuda") != torch.device("cuda:0")`, so an env on "cuda" would refuse its own
    tensors), "cpu:0" -> cpu (a CPU tensor's device has no index)."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    if dev.type == "cpu":
        return torch.device("cpu")
    return dev


def resolve_device(spec: str) -> torch.device:
    """`auto` -> CUDA when present, else CPU; anything else must be a valid, available device (cuda
    -> cuda:N)."""
    if spec == "auto":
        return canonical("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(spec)
    except (RuntimeError, TypeError) as e:
        raise UserError(
            f"--device {spec!r} is not a device: use auto, cpu, cuda or cuda:N ({e})"
        ) from None
    if dev.type not in ("cpu", "cuda"):
        raise UserError(
            f"--device {spec!r}: environments and learners run on cpu or cuda; use auto, cpu, cuda "
            f"or cuda:N"
        )
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(
            f"--device {spec} asked for CUDA but torch sees no GPU here; use --device auto or cpu"
        )
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UserError(
            f"--device {spec}: this machine has {torch.cuda.device_count()} GPU(s), cuda:0 to "
            f"cuda:{torch.cuda.device_count() - 1}"
        )
    return canonical(dev)


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity: `taskset`, a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


# the variables a user sets to size OpenMP/MKL thread pools; `--threads auto` honours them
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _given_threads(spec) -> int | None:
    """The threads the user asked for: `--threads N`, else a thread variable, else None."""
    if spec != "auto":
        if not isinstance(spec, int) or isinstance(spec, bool) or spec < 1:
            raise UserError(f"--threads {spec!r}: give auto or a number of threads, at least 1")
        return spec
    for var in THREAD_VARS:
        value = os.environ.get(var, "").strip()
        if value:
            if not value.isdigit() or int(value) < 1:
                raise UserError(f"{var}={value!r} is not a number of threads; set it to 1 or more")
            return int(value)
    return None


def resolve_threads(spec, device: torch.device) -> int:
    """The torch threads a run computes with (`--threads`): a number given is taken as it is; `auto`
    is `OMP_NUM_THREADS` (or `MKL_NUM_THREADS`) when the user set it, else one thread on a CPU run
    and torch's own default on a GPU one (where the CPU only launches kernels).

    One thread on a CPU, for every task: torch's default, a thread per core, made runs side by side
    several times slower each (OpenMP's threads spin waiting for each other on shared cores), and
    gains a run alone little for an MLP; a CNN run alone is faster with the cores (`--threads N`).
    One thread also keeps a run's numbers the same on machines with other core counts: the thread
    count changes how a CPU sums (measured: bench/results/threads.md)."""
    given = _given_threads(spec)
    if given is not None:
        return given
    return 1 if device.type == "cpu" else torch.get_num_threads()


# the threads of the CPU simulators a run makes (the batched MuJoCo backend): `set_threads` sets
# them for the process, as torch's own pool is set for it
_SIMULATOR_THREADS: list[int] = []


def simulator_threads() -> int:
    """The threads a CPU simulator made now takes: the run's `--threads` (or thread variable) when
    given, else every core this process may use (a simulator's pool waits without spinning: runs
    side by side share the cores without the slowdown of torch's); never more than the cores."""
    cores = available_cores()
    return min(_SIMULATOR_THREADS[0], cores) if _SIMULATOR_THREADS else cores


def set_threads(spec, device: torch.device) -> int:
    """Set this process's threads for a run: torch's pool (`resolve_threads`) and the CPU
    simulators' (`simulator_threads`). Returns torch's."""
    threads, given = resolve_threads(spec, device), _given_threads(spec)
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    _SIMULATOR_THREADS[:] = [] if given is None else [given]
    return threads


def check_seed(seed) -> int:
    """A seed torch, numpy and the environments all take: an int in [-2**63, 2**63)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not -(2**63) <= seed < 2**63:
        raise UserError(f"--seed {seed!r}: a seed is an integer in [-2**63, 2**63)")
    return seed


def seed_everything(seed: int) -> None:
    check_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Host RNG states (python, numpy, torch CPU and CUDA) as checkpoint-safe objects."""
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    name, keys, *rest = state["numpy"]
    # .cpu(): a checkpoint loaded with map_location="cuda" brings these byte tensors to the GPU, and
    # the RNGs take their states from host memory only
    np.random.set_state((name, keys.cpu().numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def compile_fn(fn, device, graphs: bool = True):
    """`torch.compile(fn)` for `--compile`. On CUDA each compiled function replays as a CUDA graph
    of its own, except with `graphs=False` (the optimizer steps: fused kernels, no graph);
    inductor's default mode elsewhere.

    Plain CUDA graphs, not mode "reduce-overhead"'s CUDA graph trees: an output of a compiled
    function stays valid until that same function runs again, which is how the loops use them
    (actions into the buffers, a loss into its backward, GAE's advantages over an update). Trees
    assume that an iteration is a forward, its backward and nothing else compiled: the optimizer
    step's graph started a new one and freed the gradients, and `ppo_vec --env Ant --compile`
    stopped at its first step ("accessing tensor output of CUDAGraphs that has been overwritten"). A
    graph of the optimizer step holds the gradients' addresses, which change from backward to
    backward (`zero_grad(set_to_none=True)`): ppo_vec's failed its static-address check. (What ran
    where and how fast: bench/results/gpu/lease.md.)"""
    if torch.device(device).type != "cuda" or not graphs:
        return torch.compile(fn)
    return torch.compile(fn, options={"triton.cudagraphs": True, "triton.cudagraph_trees": False})
