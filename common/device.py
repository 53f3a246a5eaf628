"""Where a run computes and how it is seeded: `--device`, `--threads`, `--compile`, seeds, and the
host RNG states a checkpoint saves."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from common.errors import UserError


def canonical(device) -> torch.device:
    """`device` as its tensors report it: "cuda" -> cuda:<current> (an env on "cuda" would refuse
    its own tensors: `torch.device("cuda") != torch.device("cuda:0")`), "cpu:0" -> cpu."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    if dev.type == "cpu":
        return torch.device("cpu")
    return dev


def resolve_device(spec: str) -> torch.device:
    """`auto` -> CUDA when present, else CPU; else a valid, available device (cuda -> cuda:N)."""
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
    """The torch threads for `--threads`: a number as given; `auto` is a thread variable the user
    set, else one on a CPU run (why: docs/usage.md#cpu-threads---threads, measured in
    bench/results/threads.md) and torch's default on a GPU one (the CPU only launches kernels)."""
    given = _given_threads(spec)
    if given is not None:
        return given
    return 1 if device.type == "cpu" else torch.get_num_threads()


# the CPU simulators' threads (batched MuJoCo) given to `set_threads`, process-wide like torch's
_SIMULATOR_THREADS: list[int] = []


def simulator_threads() -> int:
    """A CPU simulator's threads: the run's `--threads` (or thread variable) when given, else every
    core this process may use (its pool does not spin); never more than the cores."""
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


def keep_host_memory(pad: int = 256 << 20) -> bool:
    """Have glibc's malloc keep freed memory in the process instead of returning it at once. By
    default it gives the top of its heap back to the system whenever 128 KiB are free there and
    serves some blocks of a few MiB with fresh mmaps, so a step that allocates and frees batch-sized
    tensors (thousands of sub-envs' states and observations) pays page faults for them every time,
    a large share of a step at thousands of sub-envs on a CPU (measured: bench/NOTES.md). Here up
    to `pad` bytes of free heap stay mapped, and blocks up to 32 MiB come from the heap.
    Process-wide, like the thread pools; numerics do not change. False (nothing done) without
    glibc (macOS, musl)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    M_TOP_PAD, M_MMAP_THRESHOLD = -2, -3  # glibc's malloc.h
    return bool(mallopt(M_TOP_PAD, pad)) and bool(mallopt(M_MMAP_THRESHOLD, 32 << 20))


def flush_denormals() -> bool:
    """Have the CPU treat subnormal floats (below 1.2e-38 in float32) as zero, in and out. Adam's
    moments of a weight whose gradient is exactly zero (a dead ReLU's, an input that never varies)
    decay geometrically into that range, and x86 arithmetic on subnormals is many times slower: an
    off-policy update's Adam steps slowed several-fold within a few thousand updates
    (bench/NOTES.md#subnormal-floats). Numbers that small change nothing a network or a simulator
    computes. Process-wide, torch's worker threads included; False where the CPU has no such
    mode."""
    return torch.set_flush_denormal(True)


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
    # .cpu(): map_location="cuda" brings these to the GPU; the RNGs take host states only
    np.random.set_state((name, keys.cpu().numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def compile_fn(fn, device, graphs: bool = True):
    """`torch.compile(fn)` for `--compile`: on CUDA a plain CUDA graph per function (none with
    `graphs=False`, for optimizer steps: their gradients' addresses change each backward under
    `zero_grad(set_to_none=True)`); inductor's default elsewhere. Not "reduce-overhead"'s graph
    trees: the loops keep an output until the same function runs again (a loss into its backward),
    but trees assume forward + backward only, and an optimizer step's graph freed the gradients
    (runs: bench/results/gpu/lease.md)."""
    if torch.device(device).type != "cuda" or not graphs:
        return torch.compile(fn)
    return torch.compile(fn, options={"triton.cudagraphs": True, "triton.cudagraph_trees": False})
