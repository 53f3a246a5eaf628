"""`--threads`: what `auto` resolves to (one thread for a small CPU run, the user's OMP_NUM_THREADS
when set), that a run applies it before its env is made (the CPU MuJoCo backend's pool follows it,
never past the cores), logs the number in args.json, and that a resumed run may change it;
population members take their share of the cores; that a run keeps the host memory it frees
(glibc) and flushes subnormal floats to zero. (Speed: bench/results/threads.md.)"""

import json
import pathlib

import pytest
import torch
from conftest import assert_user_error

from common.device import available_cores, resolve_threads, set_threads
from common.errors import UserError

CPU = torch.device("cpu")


@pytest.fixture
def no_thread_vars(monkeypatch):
    """A user who set no thread variable; torch's own pool restored after the test."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_auto_is_one_thread_on_a_cpu_run(no_thread_vars):
    assert resolve_threads("auto", CPU) == 1


def test_auto_honours_the_users_thread_variables(no_thread_vars, monkeypatch):
    monkeypatch.setenv("MKL_NUM_THREADS", "2")
    assert resolve_threads("auto", CPU) == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # OpenMP's, torch's own pool, first
    assert resolve_threads("auto", CPU) == 3


def test_a_number_given_is_taken_as_it_is(no_thread_vars, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert resolve_threads(2, CPU) == 2
    assert set_threads(2, CPU) == 2 and torch.get_num_threads() == 2


@pytest.mark.parametrize("spec", [0, -1, True])
def test_a_number_of_threads_below_one_is_refused(spec, capfd):
    with pytest.raises(UserError) as e:
        resolve_threads(spec, CPU)
    assert "--threads" in assert_user_error(e.value, capfd)


def test_a_thread_variable_that_is_no_number_is_refused_naming_it(no_thread_vars, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "four")
    with pytest.raises(UserError, match="OMP_NUM_THREADS"):
        resolve_threads("auto", CPU)


def test_a_small_cpu_run_trains_on_one_thread_and_logs_it(no_thread_vars, tmp_path):
    """torch's default pool (a thread a core) before the run; `auto` makes it one, before the env
    is made, and args.json says so. The run also has the CPU flush subnormal floats to zero
    (`flush_denormals`: arithmetic on them is many times slower)."""
    from algos import ppo_vec

    torch.set_num_threads(max(2, available_cores()))
    tiny = torch.tensor([1e-39])  # subnormal in float32
    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU has no flush-to-zero mode")
    assert (tiny * 1.0).item() != 0.0
    args = ppo_vec.Args(
        env="CartPole-v1", num_envs=4, num_steps=8, total_steps=64, out_dir=str(tmp_path),
        device="cpu", quiet=True, plots=False, tensorboard=False,
    )  # fmt: skip
    result = ppo_vec.main(args)
    assert torch.get_num_threads() == 1
    logged = json.loads((pathlib.Path(result["run_dir"]) / "args.json").read_text())
    assert logged["threads"] == 1
    assert (tiny * 1.0).item() == 0.0


def test_the_mujoco_cpu_backend_takes_the_threads_given_else_the_cores(no_thread_vars, monkeypatch):
    """Its pool does not spin: with `auto` it takes every core; a number given (or a thread
    variable) caps it, never past the cores."""
    import envs

    cores = available_cores()
    for spec, expected in (("auto", cores), (1, 1), (64, cores), ("auto", 1)):
        if expected == 1 and spec == "auto":
            monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a sweep's one thread a run
        set_threads(spec, CPU)
        env = envs.make("Hopper", 4, "cpu", seed=0, backend="batch")
        assert env.sim.nthread == expected, (spec, env.sim.nthread)
        env.close()


def test_a_resumed_run_may_change_its_threads(tmp_path):
    from algos import ppo_vec

    from common.checkpoint import resume_args

    args = ppo_vec.Args(env="CartPole-v1", num_envs=4, num_steps=8, total_steps=64)
    ckpt = {"algo": "ppo_vec", "args": {**vars(args), "threads": 1}}
    resumed = resume_args(ppo_vec.Args(env="CartPole-v1", threads=2, resume="x"), ckpt)
    assert resumed.threads == 2 and resumed.num_envs == 4


def test_population_members_share_the_cores(monkeypatch):
    from population.population import PopArgs, member_threads

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert member_threads(PopArgs()) == max(1, available_cores() // 2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(4 * available_cores()))
    assert member_threads(PopArgs()) == 1
    assert member_threads(PopArgs(threads=3)) == 3


# a fresh process frees 128 MiB of batch-sized tensors (8 MiB each) and reports the free heap it
# kept (glibc's `mallinfo2`), with or without `keep_host_memory` first
_FREED_AND_KEPT = """
import ctypes, sys, torch
sys.path.insert(0, sys.argv[1])
from common.device import keep_host_memory
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                "usmblks", "fsmblks", "uordblks", "fordblks",
                                                "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
kept = sys.argv[2] == "1" and keep_host_memory()
tensors = [torch.ones(2 << 20) for _ in range(16)]
del tensors
print(int(kept), libc.mallinfo2().fordblks >> 20)
"""


def test_a_run_keeps_the_host_memory_it_frees():
    """With glibc, `keep_host_memory` (every run calls it) leaves freed batch-sized blocks mapped in
    the process (the next step reuses them without page faults); by default they go back."""
    import ctypes
    import subprocess
    import sys

    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("not glibc >= 2.33: keep_host_memory does nothing here")
    root = str(pathlib.Path(__file__).resolve().parents[1])
    got = {}
    for keep in ("0", "1"):
        out = subprocess.run([sys.executable, "-c", _FREED_AND_KEPT, root, keep],
                             capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
        got[keep] = (int(out[0]), int(out[1]))
    assert got["1"][0] == 1, "mallopt refused the settings"
    assert got["1"][1] >= 128, f"free heap kept (MiB), with and without: {got}"
    assert got["0"][1] < 64, f"free heap kept (MiB), with and without: {got}"
