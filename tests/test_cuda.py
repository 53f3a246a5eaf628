"""The GPU tier (`pytest -m cuda`, issue 19): every code path that only runs on CUDA, run and
checked.

Skipped as a whole where torch sees no GPU (the CPU suite collects and skips it). On a GPU machine:

    pytest -m cuda -n 0  # this module, plus the CUDA cases of test_per.py and test_mujoco_parity.py

`-n 0`: one process owns the GPU (xdist workers would each start a CUDA context and compile Warp
kernels).

What is covered, path by path:
* MuJoCo Warp on CUDA, the frame-skip loop replayed as a CUDA graph: against gymnasium on
  contact-free steps (test_mujoco_parity.py, CUDA case), graph replay == eager launches here, and
  `step` makes no host sync (CUDA's own sync detector, `torch.cuda.set_sync_debug_mode("error")`),
  resets masked on the device included;
* the envs' deferred action checks: a NaN (or out-of-range) action does not stop `step`, the logging
  tick raises;
* whole training loops on CUDA make no per-iteration host sync (CUDA's detector in warn mode: a
  short and a longer run see the same number of syncs);
* `--compile` (a CUDA graph per compiled function; the optimizer steps fused, without one) runs as a
  user runs it, and gives the eager run's parameters for a few PPO and SAC updates (xfail: see that
  test);
* `NumericGuard`'s deferred on-device flag (read through pinned memory): an injected NaN stops the
  run within two vectorized steps, named, and never reaches a checkpoint;
* exact `--resume` on CUDA (ppo_vec, sac): the resumed run ends bit-identical; on MuJoCo Warp (whose
  solver's atomics make no two runs identical) the env state round-trips exactly and a resumed run
  trains to its end;
* PER's sum tree without host syncs (test_per.py, CUDA case);
* `--pipeline`: the explorer on its own CUDA stream, same seed same result;
* NCCL: the fusion helpers on a one-process NCCL group (and `torchrun --nproc-per-node 2` PPO when
  there are two GPUs: NCCL refuses two ranks on one GPU);
* population training with its members on the GPU;
* MinAtar's batched games on CUDA: no host sync in `step`, and the same trajectories as on the CPU
  from the same uniforms and actions.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import envs
from conftest import (
    ROOT,
    SMALL_PPO_HOPPER,
    SMALL_RUNS,
    assert_same,
    checkpoint_params,
    free_port,
    run_with_snapshots,
)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs CUDA (pytest -m cuda on a GPU machine)"
    ),
]
CUDA = "cuda"


def _module(name: str):
    return importlib.import_module(f"algos.{name}")


def _warp():
    pytest.importorskip("mujoco_warp")


# ---- MuJoCo Warp on CUDA -------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ["Ant-v5", "Humanoid-v5"])
def test_warp_cuda_graph_equals_eager_launches(env_id):
    """The captured frame-skip graph computes what launching the kernels one by one computes, step
    by step from the same state. (Not whole trajectories: MuJoCo Warp's solver sums with atomics,
    whose order varies from run to run, and on contact-rich steps those last-bit differences grow
    chaotically: on an H200 two eager Ant runs differed by more than 1e-5 at step 3.)"""
    _warp()
    n, steps = 64, 40
    graph = envs.make(env_id, num_envs=n, seed=3, device=CUDA, backend="warp")
    eager = envs.make(env_id, num_envs=n, seed=3, device=CUDA, backend="warp")
    eager.sim._use_graph = False
    g = torch.Generator(device=CUDA).manual_seed(0)
    o1, _ = graph.reset(seed=3)
    o2, _ = eager.reset(seed=3)
    torch.testing.assert_close(o1, o2, rtol=0, atol=0)
    dims = graph.single_action_space.shape
    resets = 0
    for t in range(steps):
        eager.load_state_dict(graph.state_dict())
        a = torch.rand(n, *dims, generator=g, device=CUDA) * 2 - 1
        r1, r2 = graph.step(a), eager.step(a)
        for x, y, what in zip(r1[:4], r2[:4], ("obs", "reward", "terminated", "truncated")):
            # one step of the same kernels on the same data: equal up to the order of the solver's
            # atomics
            torch.testing.assert_close(
                x, y, rtol=1e-3, atol=1e-3, msg=f"{env_id} {what} differs at step {t}"
            )
        resets += int((r1[2] | r1[3]).sum())
    # both the frame-skip loop and the masked reset ran as graphs, and the reset's graph reset
    # worlds
    assert set(graph.sim._graphs) == {"step", "reset"} and not eager.sim._graphs
    if env_id == "Humanoid-v5":  # random actions topple it within ~20 steps
        assert resets > 0, "no world was reset: the reset graph was not compared"


@pytest.mark.parametrize("env_id", ["Ant-v5", "Hopper-v5"])
def test_warp_step_makes_no_host_sync(env_id, monkeypatch):
    """After the first steps (kernel loading, graph capture), `step` never waits for the GPU, also
    when worlds terminate and are reset (masked on the device). Hopper's random actions end episodes
    within ~20 steps. Two detectors: CUDA's (torch's syncs) and Warp's own waits, counted (torch's
    detector does not see them: the reset launched eagerly waited once per solver iteration in
    `wp.capture_while`, and this test passed on an H100 before it counted Warp's waits)."""
    _warp()
    import warp as wp

    waits = []
    for name in ("synchronize", "synchronize_device", "synchronize_stream"):
        orig = getattr(wp, name)
        monkeypatch.setattr(
            wp,
            name,
            lambda *a, _orig=orig, _name=name, **k: (waits.append(_name), _orig(*a, **k))[1],
        )
    orig_numpy = wp.array.numpy
    monkeypatch.setattr(
        wp.array, "numpy", lambda self: (waits.append("array.numpy"), orig_numpy(self))[1]
    )
    n = 256
    env = envs.make(env_id, num_envs=n, seed=0, device=CUDA, backend="warp")
    env.reset(seed=0)
    dims = env.single_action_space.shape
    g = torch.Generator(device=CUDA).manual_seed(1)
    for _ in range(3):
        env.step(torch.rand(n, *dims, generator=g, device=CUDA) * 2 - 1)
    torch.cuda.synchronize()
    dones = torch.zeros(n, device=CUDA)
    waits.clear()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(60):
            _, _, term, trunc, info = env.step(
                torch.rand(n, *dims, generator=g, device=CUDA) * 2 - 1
            )
            dones += (term | trunc).float()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert not waits, (
        f"Warp waited for the GPU {len(waits)} times in 60 steps: {sorted(set(waits))}"
    )
    if env_id == "Hopper-v5":
        assert dones.sum().item() > 0, "no episode ended: the reset path was not exercised"


def test_deferred_action_checks_raise_at_the_logging_tick():
    """On CUDA a bad action does not stop `step` (no host sync); `raise_deferred_errors` (the
    logging tick) names it."""
    cart = envs.make("CartPole-v1", num_envs=4, device=CUDA)
    cart.reset(seed=0)
    cart.step(torch.tensor([0, 1, 5, 0], device=CUDA))
    with pytest.raises(ValueError, match="invalid action values, expected integers in \\[0, 2\\)"):
        cart.raise_deferred_errors()
    if importlib.util.find_spec("mujoco_warp") is not None:
        hop = envs.make("Hopper-v5", num_envs=2, device=CUDA, backend="warp")
        hop.reset(seed=0)
        hop.step(torch.zeros(2, 3, device=CUDA))
        hop.raise_deferred_errors()  # finite actions: nothing recorded
        hop.step(torch.full((2, 3), float("nan"), device=CUDA))
        with pytest.raises(ValueError, match="finite floats"):
            hop.raise_deferred_errors()


# ---- training loops on CUDA ----------------------------------------------------------------------
# (file, settings); tiny networks, a few iterations
LOOPS = {
    "ppo_vec": (
        "ppo_vec",
        dict(
            env="CartPole-v1",
            num_envs=64,
            num_steps=8,
            num_minibatches=2,
            update_epochs=2,
            hidden=(32,),
        ),
    ),
    "ppo_vec-pendulum-norm": (
        "ppo_vec",
        dict(
            env="Pendulum-v1",
            num_envs=64,
            num_steps=8,
            num_minibatches=2,
            update_epochs=2,
            hidden=(32,),
            norm_obs=True,
            norm_reward=True,
        ),
    ),
    # the Beta policy's draws (torch's Dirichlet sampler) inside the captured iteration
    "ppo_beta-pendulum": (
        "ppo_beta",
        dict(env="Pendulum-v1", num_envs=64, num_steps=8, num_minibatches=2, update_epochs=2),
    ),
    "ppo_vec-ant-warp": (
        "ppo_vec",
        dict(
            env="Ant-v5",
            num_envs=256,
            num_steps=8,
            num_minibatches=2,
            update_epochs=2,
            hidden=(32,),
            mujoco_backend="warp",
        ),
    ),
    "sac": (
        "sac",
        dict(env="Pendulum-v1", num_envs=8, batch_size=64, hidden=(32,), learning_starts=16),
    ),
    "sac-per": (
        "sac",
        dict(
            env="Pendulum-v1", num_envs=8, batch_size=64, hidden=(32,), learning_starts=16, per=True
        ),
    ),
    "td3": (
        "td3",
        dict(env="Pendulum-v1", num_envs=8, batch_size=64, hidden=(32,), learning_starts=16),
    ),
    "fast_td3": (
        "fast_td3",
        dict(env="Pendulum-v1", num_envs=8, batch_size=64, hidden=(32,), learning_starts=32),
    ),
    "dqn": (
        "dqn",
        dict(env="CartPole-v1", num_envs=8, batch_size=64, hidden=(32,), learning_starts=16),
    ),
}


def _count_cuda_syncs(case: str, iterations: int, tmp_path, monkeypatch) -> int:
    """Synchronizing CUDA calls (CUDA's own detector, warn mode) during a run of `iterations`
    vectorized steps, with no time-based logging tick and the evaluation stubbed
    (tests/test_host_sync.py explains the set-up), counted by the innermost frame of this
    repository's code on the stack when each was reported."""
    from collections import Counter

    from test_host_sync import FrozenClock, _site, fake_evaluate

    import common.logger

    name, settings = LOOPS[case]
    mod = _module(name)
    monkeypatch.setattr(common.logger, "time", FrozenClock())
    import common.run

    monkeypatch.setattr(common.run if hasattr(mod, "Run") else mod, "evaluate", fake_evaluate)
    if hasattr(mod, "time"):
        monkeypatch.setattr(mod, "time", FrozenClock())
    fields = mod.Args.__dataclass_fields__
    steps = settings["num_envs"] * settings.get("num_steps", 1)
    if "warp" in case:
        _warp()
    args = mod.Args(
        seed=3,
        total_steps=iterations * steps,
        eval_every=0,
        save_every=0,
        quiet=True,
        device=CUDA,
        out_dir=str(tmp_path / f"{case}-{iterations}"),
        **{k: v for k, v in settings.items() if k in fields},
    )
    sites: Counter = Counter()

    # called while the op is on the stack
    def show(message, category, filename, lineno, file=None, line=None):
        if "synchronizing" in str(message):
            sites[_site(sys._getframe(1)) or f"{filename}:{lineno}"] += 1

    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")
        try:
            mod.main(args)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return sites


@pytest.mark.parametrize("case", list(LOOPS))
def test_training_loop_makes_no_host_sync_on_cuda(case, tmp_path, monkeypatch):
    short = _count_cuda_syncs(case, 6, tmp_path, monkeypatch)
    long = _count_cuda_syncs(case, 18, tmp_path, monkeypatch)
    # a sync in the loop adds one per iteration: 12 more in the longer run. The final logging tick
    # reads a number of values that depends on the run's state (whether an episode has finished,
    # say): an H200 run counted 56 and 55.
    grown = {k: (short.get(k, 0), n) for k, n in long.items() if n - short.get(k, 0) > 2}
    assert not grown, (
        f"{case}: synchronizing CUDA calls that grow with the number of iterations (site: calls in "
        f"6 vs 18 iterations): {grown}"
    )
    # the detector is on: the final logging tick reads values
    assert sum(short.values()) > 0, dict(short)


def _compile_settings(name: str) -> dict:
    if name == "ppo_vec":  # continuous actions: a rounding difference cannot flip a sampled action
        kw = dict(
            env="Pendulum-v1",
            num_envs=32,
            num_steps=16,
            num_minibatches=2,
            update_epochs=2,
            total_steps=32 * 16 * 3,
        )
    else:
        kw = dict(
            env="Pendulum-v1",
            num_envs=4,
            total_steps=4 * 40,
            learning_starts=4 * 10,
            batch_size=64,
            gradient_steps=1,
        )
    return dict(kw, eval_every=0, save_every=0, quiet=True, device=CUDA, hidden=(64, 64), seed=5)


@pytest.mark.slow  # torch.compile: a minute or two per file
@pytest.mark.parametrize("name", ["ppo_vec", "sac"])
def test_compile_with_cuda_graphs_runs(name, tmp_path):
    """`--compile` as a user runs it (`common.device.compile_fn`: CUDA graphs, inductor's own random
    numbers) trains to the end of a short run, with finite parameters. (Whether it computes what
    eager does is the next test's question, open: see its xfail.)"""
    mod = _module(name)
    res = mod.main(
        mod.Args(out_dir=str(tmp_path / "compiled"), compile=True, **_compile_settings(name))
    )
    compiled = checkpoint_params(res["checkpoint"])
    assert res["steps"] >= _compile_settings(name)["total_steps"]
    assert all(bool(torch.isfinite(v.float()).all()) for v in compiled.values())


@pytest.mark.slow
@pytest.mark.xfail(
    reason="H200, 2026-11-26: with inductor's fallback_random, eager's random kernels run inside "
    "the captured CUDA graph and CUDA refuses them (cudaErrorStreamCaptureUnsupported at "
    "aten.normal; sac: 'Offset increment outside graph capture'); drawing the same numbers both "
    "ways needs another route (e.g. the noise drawn outside the compiled function)",
    strict=False,
)
@pytest.mark.parametrize("name", ["ppo_vec", "sac"])
def test_compile_with_cuda_graphs_matches_eager(name, tmp_path, monkeypatch):
    """A few updates with `--compile` (CUDA graphs, capturable Adam) end where the eager run ends.
    Inductor's random ops fall back to eager's (`fallback_random`), so both runs draw the same
    numbers."""
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(inductor_config, "fallback_random", True)
    mod = _module(name)
    kw = _compile_settings(name)
    eager = checkpoint_params(
        mod.main(mod.Args(out_dir=str(tmp_path / "eager"), compile=False, **kw))["checkpoint"]
    )
    compiled = checkpoint_params(
        mod.main(mod.Args(out_dir=str(tmp_path / "compiled"), compile=True, **kw))["checkpoint"]
    )
    for k in eager:
        torch.testing.assert_close(
            compiled[k].float(),
            eager[k].float(),
            rtol=1e-3,
            atol=1e-4,
            msg=f"{name}: {k} after the compiled run differs from the eager run's",
        )


# ---- NumericGuard's deferred flag ----------------------------------------------------------------
# mappo: its categorical's NaN path (common.distributions)
@pytest.mark.parametrize("name", ["ppo_vec", "sac", "mappo"])
@pytest.mark.parametrize("what", ["observations", "rewards", "parameters"])
def test_nan_is_caught_within_two_steps_and_never_checkpointed(name, what, tmp_path, monkeypatch):
    from test_faults import CONFIGS, _all_finite, _poison_params

    mod = _module(name)
    kw = dict(CONFIGS[name], out_dir=str(tmp_path), eval_every=0, device=CUDA)
    # the poison is Python code in `step`: a replayed graph skips it
    if "capture" in mod.Args.__dataclass_fields__:
        # (a captured run's guard: tests/test_graphs.py::test_nan_stops_a_captured_run)
        kw["capture"] = False
    calls = kw["total_steps"] // kw["num_envs"]
    at, seen = int(0.7 * calls), [0]
    # as tests/test_faults.py: the first optimizer step 70% of the way through breaks
    if what == "parameters":
        _poison_params(monkeypatch, after_env_calls=at, num_envs=kw["num_envs"])
    make = envs.make

    def poisoned_make(*a, **k):
        env = make(*a, **k)
        n = k.get("num_envs", a[1] if len(a) > 1 else None)  # by keyword or positional
        if n != kw["num_envs"] or hasattr(env, "_poisoned"):
            return env
        step = env.step

        def bad_step(actions):
            out = list(step(actions))
            seen[0] += 1
            if what != "parameters" and seen[0] >= at:
                i = 0 if what == "observations" else 1
                out[i] = out[i].clone()
                out[i][(0,) * out[i].dim()] = float("nan")
            return tuple(out)

        env.step, env._poisoned = bad_step, True
        return env

    monkeypatch.setattr(envs, "make", poisoned_make)
    expected = "in the (parameters|[a-zA-Z -]*loss) " if what == "parameters" else f"in the {what} "
    with pytest.raises(FloatingPointError, match=expected) as err:
        mod.main(mod.Args(**kw))
    # the flag is copied without waiting and read one check (one update) later at most:
    if what != "parameters":
        # env step calls between checks (PPO: a rollout; SAC: one)
        per_update = kw.get("num_steps", 1)
        assert seen[0] - at <= 2 * per_update, (
            f"{name}: the NaN of env step call {at} was reported at call {seen[0]}"
        )
    ckpt = next(tmp_path.iterdir()) / "checkpoint.pt"
    assert ckpt.is_file()
    assert _all_finite(torch.load(ckpt, weights_only=False, map_location="cpu")), (
        "a checkpoint holds a NaN"
    )
    assert "--resume" in str(err.value)


# ---- exact resume on CUDA ------------------------------------------------------------------------
RESUME = {
    "ppo_vec": ("ppo_vec", SMALL_RUNS["ppo_vec"]),
    "sac": ("sac", SMALL_RUNS["sac"]),
}


def _run_and_resume(mod, kw: dict, tmp_path, monkeypatch) -> tuple[dict, dict]:
    """Runs `mod` on CUDA to its end, keeping a copy of every checkpoint, then resumes a second run
    from the first copy to the same step budget; returns both runs' results."""
    full, snaps = run_with_snapshots(
        mod, mod.Args(out_dir=str(tmp_path / "full"), device=CUDA, **kw), monkeypatch
    )
    assert len(snaps) >= 2
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copy(snaps[0], resumed_dir / "checkpoint.pt")
    resumed = mod.main(
        mod.Args(
            resume=str(resumed_dir / "checkpoint.pt"),
            quiet=True,
            eval_episodes=2,
            eval_every=0,
            save_every=0,
            total_steps=kw["total_steps"],
            device=CUDA,
        )
    )
    return full, resumed


@pytest.mark.parametrize("case", list(RESUME))
def test_resume_on_cuda_is_bit_exact(case, tmp_path, monkeypatch):
    """Interrupted at its first checkpoint and resumed, a CUDA run ends with the uninterrupted run's
    checkpoint: parameters, optimizer, env state, normalizers, RNG (CUDA generators included).
    (MuJoCo Warp: the next test.)"""
    name, kw = RESUME[case]
    full, resumed = _run_and_resume(_module(name), kw, tmp_path, monkeypatch)
    a = torch.load(full["checkpoint"], weights_only=False, map_location="cpu")
    b = torch.load(resumed["checkpoint"], weights_only=False, map_location="cpu")
    keys = [k for k in a if k not in ("seconds", "args")]
    assert keys == [k for k in b if k not in ("seconds", "args")]
    for key in keys:
        assert_same(a[key], b[key], where=f"{case}: {key}")


def test_resume_on_cuda_with_warp_restores_the_checkpoint(tmp_path, monkeypatch):
    """MuJoCo Warp's solver sums with atomics in an order that varies from run to run, so no run on
    Warp is bit-exact, resumed or not: two uninterrupted runs differ in the last bits within a few
    steps, and chaotically after (H200, 2026-11-26: a resumed and an uninterrupted Hopper run ended
    with episode returns 11.1 and 9.9). What resume owes it: the checkpoint's env state comes back
    exactly (the worlds' qpos, qvel, ctrl and solver warm start, the step counters, the RNG), and a
    resumed run trains on from its checkpoint to the end."""
    _warp()
    env = envs.make("Hopper-v5", num_envs=16, seed=0, device=CUDA, backend="warp")
    env.reset(seed=0)
    g = torch.Generator(device=CUDA).manual_seed(0)
    for _ in range(30):  # random actions: episodes end and worlds reset on the way
        env.step(torch.rand(16, 3, generator=g, device=CUDA) * 2 - 1)
    saved = env.state_dict()
    other = envs.make("Hopper-v5", num_envs=16, seed=1, device=CUDA, backend="warp")
    other.reset(seed=1)
    other.load_state_dict(saved)
    assert_same(
        other.state_dict(), saved, where="Hopper-v5 on Warp: env state after load_state_dict"
    )

    kw = dict(SMALL_PPO_HOPPER, mujoco_backend="warp")
    full, resumed = _run_and_resume(_module("ppo_vec"), kw, tmp_path, monkeypatch)
    assert resumed["steps"] == full["steps"] == kw["total_steps"]
    assert all(
        bool(torch.isfinite(v.float()).all())
        for v in checkpoint_params(resumed["checkpoint"]).values()
    )


# ---- --pipeline: the explorer on its own CUDA stream ---------------------------------------------
@pytest.mark.parametrize("name", ["sac_podracer", "td3_podracer"])
def test_pipeline_on_cuda_same_seed_same_result(name, tmp_path):
    from test_pipeline import SMALL, _params, _same

    mod = _module(name)
    kw = dict(SMALL, device=CUDA)
    r1 = mod.main(mod.Args(out_dir=str(tmp_path / "a"), **kw))
    r2 = mod.main(mod.Args(out_dir=str(tmp_path / "b"), **kw))
    assert _same(_params(r1["checkpoint"]), _params(r2["checkpoint"])), (
        f"{name} --pipeline on CUDA is not reproducible"
    )
    rows = [json.loads(line) for line in open(Path(r1["run_dir"]) / "metrics.jsonl")]
    assert any("pipeline_overlap" in r for r in rows)


# ---- NCCL ----------------------------------------------------------------------------------------
def _nccl_worker(rank: int, port: int, out: str) -> None:
    """One process, one GPU, an NCCL group of one: every helper of common/distributed.py runs its
    collective."""
    import dataclasses

    import torch.distributed as dist

    from common import distributed
    from common.wrappers import RunningMeanStd

    @dataclasses.dataclass(frozen=True)
    class One(distributed.Context):  # a group of one that still calls the collectives
        @property
        def enabled(self) -> bool:
            return True

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1)
    ctx = One(0, 1, 0)
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2).cuda()
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    net(torch.randn(4, 3, device="cuda")).square().sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    distributed.allreduce_gradients(ctx, [net])
    opt.step()
    before = [p.detach().clone() for p in net.parameters()]
    distributed.fuse(ctx, [net], [opt])
    distributed.broadcast(ctx, [net])
    rms = RunningMeanStd((3,), "cuda")
    rms.update(torch.randn(10, 3, device="cuda"))
    rms_before = rms.state_dict()
    distributed.fuse_statistics(ctx, [rms])
    mean = distributed.all_mean(ctx, torch.tensor([1.0, 2.0], device="cuda"))
    gathered = distributed.gather_to_main(ctx, {"x": torch.ones(2, device="cuda")})
    torch.save(
        {
            "grads": grads,
            "after_grads": [p.grad for p in net.parameters()],
            "before": before,
            "after": [p.detach() for p in net.parameters()],
            "rms": (rms_before, rms.state_dict()),
            "mean": mean,
            "gathered": gathered,
        },
        f"{out}/nccl.pt",
    )
    dist.destroy_process_group()


def test_nccl_helpers_on_one_gpu(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_nccl_worker, args=(free_port(), str(tmp_path)), nprocs=1, join=True)
    r = torch.load(tmp_path / "nccl.pt", weights_only=False, map_location="cpu")
    for a, b in zip(r["grads"], r["after_grads"]):
        torch.testing.assert_close(a, b)  # the mean over one rank is the rank's own
    for a, b in zip(r["before"], r["after"]):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(r["rms"][0]["mean"], r["rms"][1]["mean"])
    torch.testing.assert_close(r["mean"], torch.tensor([1.0, 2.0]))
    assert len(r["gathered"]) == 1 and torch.equal(r["gathered"][0]["x"].cpu(), torch.ones(2))


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs one GPU per rank: two GPUs")
def test_torchrun_two_gpus_ppo_learns_cartpole(tmp_path):
    script = (
        "import json, sys; sys.path.insert(0, '.');"
        "from algos import ppo_podracer;"
        "r = ppo_podracer.main(ppo_podracer.Args(env='CartPole-v1', num_envs=1024, "
        "total_steps=1_000_000, eval_every=0,"
        f" save_every=0, quiet=True, device='cuda', out_dir={str(tmp_path)!r}));"
        # one write: the ranks share the pipe
        "sys.stdout.write('RESULT ' + json.dumps(r) + chr(10))"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            "--no-python",
            sys.executable,
            "-c",
            script,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    results = [
        json.loads(line.split("RESULT", 1)[1])
        for line in out.stdout.splitlines()
        if "RESULT" in line
    ]
    main = [r for r in results if r["run_dir"] != "None"]
    assert len(main) == 1 and main[0]["eval_return"] >= 400, results


# ---- population members on the GPU ---------------------------------------------------------------
@pytest.mark.slow
def test_population_members_train_on_the_gpu(tmp_path):
    from population import population as P

    cmd = [
        sys.executable,
        "-m",
        "population",
        "--dir",
        str(tmp_path / "pop"),
        "--population",
        "2",
        "--rounds",
        "2",
        "--steps-per-round",
        "60000",
        "--",
        "--env",
        "CartPole-v1",
        "--num-envs",
        "256",
        "--device",
        "cuda",
        "--no-anneal-lr",
    ]
    out = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    index = json.loads((tmp_path / "pop" / "leaderboard.json").read_text())
    assert {f"m{m}-r1" for m in range(2)} <= {e["id"] for e in index}
    ckpt = torch.load(index[0]["checkpoint"], weights_only=False, map_location="cpu")
    assert ckpt["args"]["device"] == "cuda"
    assert index[0]["score"] >= 400, index[0]
    assert [e for e in P.read_events(tmp_path / "pop") if e["event"] == "round"]


@pytest.mark.parametrize("game", ["Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders"])
def test_minatar_on_cuda_equals_the_cpu_and_never_syncs(game):
    """Both devices draw their uniforms from one CPU generator each (same seed) and take the same
    actions: observations, rewards and flags agree on every step, resets included (a 200-step
    limit). Then, drawing on the device as it does in training, `step` makes no host sync (CUDA's
    detector)."""
    from envs.minatar import GAMES

    class FromCpu(GAMES[game]):
        def _uniforms(self, n, k):
            return torch.rand(n, k, generator=self.host_rng).to(self.device)

    def make(device):
        FromCpu.host_rng = torch.Generator().manual_seed(0)
        env = FromCpu(num_envs=512, device=device, seed=0, max_episode_steps=200)
        env.host_rng = FromCpu.host_rng
        return env

    cpu, gpu = make("cpu"), make(CUDA)
    assert torch.equal(cpu.reset(seed=0)[0], gpu.reset(seed=0)[0].cpu())
    g = torch.Generator().manual_seed(1)
    acts = torch.randint(0, cpu.single_action_space.n, (300, 512), generator=g)
    ended = 0
    for t in range(300):
        out_cpu, out_gpu = cpu.step(acts[t]), gpu.step(acts[t].to(CUDA))
        for x, y in zip(out_cpu[:4], out_gpu[:4]):
            assert torch.equal(x, y.cpu()), (game, t)
        ended += int((out_cpu[2] | out_cpu[3]).sum())
    assert ended > 0
    env = GAMES[game](num_envs=512, device=CUDA, seed=0, max_episode_steps=50)
    env.reset(seed=0)
    acts = acts.to(CUDA)
    for t in range(3):
        env.step(acts[t])
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for t in range(100):
            env.step(acts[t])
    finally:
        torch.cuda.set_sync_debug_mode(0)
