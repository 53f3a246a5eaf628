"""A training iteration captured as one CUDA graph (common/graphs.py, issue 59).

On a CPU: the check that guards capture finds state that is rebound, Python numbers that change and
host traffic (and stays eager with one warning naming them); ppo_vec's iteration passes it on the
envs a GPU run captures (classic control, normalized observations and rewards, MuJoCo Warp), as
every PPO file's does, as do the off-policy files' updates of a vectorized step; and
`bench/micro/op_count.py` counts at most 100 launches per captured PPO iteration on Warp Ant
(thousands eager) and one for fast_td3's updates. On CUDA (`pytest -m cuda`): the captured loop is
the eager loop (same parameters), it replays on MuJoCo Warp, a numpy env trains eagerly with a
warning, the NaN guard still stops a captured run, and a captured sample reaches the replay rows
added after its capture.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from dataclasses import replace

import pytest
import torch

import envs
from common.graphs import Captured, check
from conftest import ALGO_FILES, ROOT, checkpoint_params, declaration

ppo = pytest.importorskip("algos.ppo_vec")
HAVE_WARP = importlib.util.find_spec("mujoco_warp") is not None


class Rebinds:
    def __init__(self):
        self.x = torch.zeros(3)
        self.steps = 0

    def step(self):
        # a new tensor each call: a replayed graph would keep writing the first one
        self.x = self.x + 1

    def count(self):
        self.steps += 1  # a Python counter: a replayed graph never runs this line


class InPlace(Rebinds):
    def step(self):
        self.x.add_(1)


def test_check_names_what_a_graph_could_not_replay():
    assert check(Rebinds().step, [Rebinds()]) == []  # another object: nothing of the state changed
    r = Rebinds()
    assert check(r.step, [r]) == ["Rebinds.x"]
    assert check(r.count, [r]) == ["Rebinds.steps"]
    ok = InPlace()
    assert check(ok.step, [ok]) == []


def test_check_names_host_reads_and_host_data_of_a_loop_on_an_accelerator():
    """A value read on the host (`.item()`) or a host tensor copied in each call (an env stepping in
    numpy): a replay would reuse what was read or copied when it was recorded. ('meta' stands for
    the accelerator here.)"""
    x = torch.ones(3)
    found = check(lambda: x.sum().item(), [], device="meta")
    assert any(f.startswith("_local_scalar_dense") for f in found)
    assert any(f.startswith("sum (a host tensor") for f in found)
    # on a CPU the host is the device: nothing to name
    assert check(lambda: x.sum().item(), [], device="cpu") == []


def _ppo_run(monkeypatch, tmp_path, simulate: bool, algo=ppo, **kw) -> tuple[list[Captured], dict]:
    made: list[Captured] = []
    init = Captured.__init__

    def record(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(Captured, "__init__", record)
    monkeypatch.setattr(Captured, "simulate", simulate)
    args = replace(
        algo.default_args(kw["env"], kw.get("num_envs"), kw.get("device", "cpu")),
        seed=1,
        eval_every=0,
        save_every=0,
        quiet=True,
        out_dir=str(tmp_path),
        **kw,
    )
    return made, algo.main(args)


CASES = {
    "cartpole": dict(env="CartPole-v1", num_envs=16, num_steps=8, total_steps=16 * 8 * 5),
    "pendulum-normalized": dict(
        env="Pendulum-v1",
        num_envs=16,
        num_steps=8,
        num_minibatches=4,
        norm_obs=True,
        norm_reward=True,
        total_steps=16 * 8 * 5,
    ),
    "ant-warp": dict(
        env="Ant",
        num_envs=8,
        num_steps=8,
        num_minibatches=2,
        update_epochs=2,
        hidden=(32,),
        mujoco_backend="warp",
        total_steps=8 * 8 * 5,
    ),
}


# MuJoCo Warp on its CPU device: its kernels compile and run slowly there (the slow tier)
@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=pytest.mark.slow) if c == "ant-warp" else c for c in CASES]
)
def test_the_ppo_iteration_passes_the_capture_check(case, monkeypatch, tmp_path):
    """The iteration a GPU run captures writes env, normalizers, episode statistics, guard and meter
    in place: the check passes and the later iterations take the replay path (eagerly here), with
    the eager run's result."""
    if "warp" in case and not HAVE_WARP:
        pytest.skip("needs mujoco_warp")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "capture ... is off" would be one
        made, simulated = _ppo_run(monkeypatch, tmp_path / "simulated", True, **CASES[case])
    assert made[0].why_eager is None and made[0].replays == 3, (made[0].why_eager, made[0].replays)
    # on a GPU, MuJoCo Warp's step and reset launch their own graphs between the iteration's
    assert made[0].cuts == (2 * CASES[case]["num_steps"] if "warp" in case else 0), made[0].cuts
    if "warp" in case:  # MuJoCo Warp's solver sums with atomics: no two runs are bit-identical
        return
    made, eager = _ppo_run(monkeypatch, tmp_path / "eager", False, **CASES[case])
    assert made[0].why_eager == "not on CUDA" and made[0].replays == 0
    a, b = checkpoint_params(simulated["checkpoint"]), checkpoint_params(eager["checkpoint"])
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "name", [n for n in ALGO_FILES if n != "ppo_vec" and declaration(n)[1] == "PPO"]
)
def test_the_rest_of_the_ppo_family_passes_the_check(name, monkeypatch, tmp_path):
    """The same iteration in every PPO file (ppo_h's H-term store included: its write position is a
    device counter)."""
    algo = importlib.import_module(f"algos.{name}")
    kw = {
        k: v for k, v in CASES["pendulum-normalized"].items() if k in algo.Args.__dataclass_fields__
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        made, _ = _ppo_run(monkeypatch, tmp_path, True, algo=algo, **kw)
    assert made[0].why_eager is None and made[0].replays == 3, (made[0].why_eager, made[0].replays)


TD3 = dict(
    env="Pendulum-v1",
    num_envs=4,
    hidden=(16, 16),
    batch_size=32,
    learning_starts=4 * 3,
    total_steps=4 * 12,
)


OFF_POLICY = ["fast_td3", "td3", "ddpg", "sac", "td3_h", "ddpg_h", "sac_h", "redq"]


@pytest.mark.parametrize("name", OFF_POLICY)
def test_the_off_policy_updates_pass_the_capture_check(name, monkeypatch, tmp_path):
    """The updates of a vectorized step (sampling, the losses, the Adam steps, the delayed actor
    and targets, the temperature, the meter's per-name counts and the guard) write in place: the
    check passes, the later steps take the replay path (eagerly here), and the result is the eager
    run's."""
    algo = importlib.import_module(f"algos.{name}")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        made, simulated = _ppo_run(monkeypatch, tmp_path / "simulated", True, algo=algo, **TD3)
    # learning from the third of 12 vectorized steps: the eager call, the checked one, 8 replays
    assert made[0].why_eager is None and made[0].replays == 8, (made[0].why_eager, made[0].replays)
    made, eager = _ppo_run(monkeypatch, tmp_path / "eager", False, algo=algo, **TD3)
    assert made[0].why_eager == "not on CUDA" and made[0].replays == 0
    a, b = checkpoint_params(simulated["checkpoint"]), checkpoint_params(eager["checkpoint"])
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", ["td3", "td3_h", "fast_td3"])
@pytest.mark.parametrize("gradient_steps", [1, 3])
def test_an_actor_turn_that_moves_is_a_graph_for_each_place_in_the_cycle(
    name, gradient_steps, monkeypatch, tmp_path
):
    """Updates per step not a multiple of the policy delay (UTD 1, a delay of 2: the actor every
    other step): one graph for each place in the actor's cycle a step can start at, each checked
    and replayed, with the eager run's result."""
    algo = importlib.import_module(f"algos.{name}")
    flags = dict(TD3, gradient_steps=gradient_steps, policy_delay=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        made, out = _ppo_run(monkeypatch, tmp_path / "simulated", True, algo=algo, **flags)
    simulated = checkpoint_params(out["checkpoint"])
    # 10 learning steps, the cycle's start alternating: each graph's eager call, check, 3 replays
    assert [(c.why_eager, c.replays) for c in made] == [(None, 3), (None, 3)]
    _, out = _ppo_run(monkeypatch, tmp_path / "eager", False, algo=algo, **flags)
    eager = checkpoint_params(out["checkpoint"])
    assert all(torch.equal(simulated[k], eager[k]) for k in simulated)


@pytest.mark.parametrize(
    "name,flags",
    [
        ("fast_td3", dict(per=True)),
        ("sac", dict(per=True)),
        ("ddpg", dict(capture=False)),
    ],
)
def test_updates_that_differ_between_calls_stay_eager(name, flags, monkeypatch, tmp_path):
    """Prioritized replay (its beta moves each step) is not captured; nor is anything with
    --no-capture."""
    algo = importlib.import_module(f"algos.{name}")
    made, out = _ppo_run(monkeypatch, tmp_path, True, algo=algo, **TD3, **flags)
    assert made[0].why_eager == "turned off" and made[0].replays == 0 and out["steps"] == 48


def test_an_env_that_keeps_python_state_stays_eager_with_one_warning(monkeypatch, tmp_path):
    make = envs.make

    def counting_make(*a, **k):
        env = make(*a, **k)
        env.calls, step = 0, env.step

        def step_and_count(actions):
            env.calls += 1
            return step(actions)

        env.step = step_and_count
        return env

    monkeypatch.setattr(envs, "make", counting_make)
    with pytest.warns(
        UserWarning, match=r"capture of the iteration is off.*\.calls: a replay would not redo it"
    ):
        made, _ = _ppo_run(monkeypatch, tmp_path, True, **CASES["cartpole"])
    assert made[0].replays == 0 and "calls" in made[0].why_eager


# Warp's CPU kernels compile on a fresh cache (about a minute), then three Ant iterations
@pytest.mark.slow
@pytest.mark.skipif(not HAVE_WARP, reason="needs mujoco_warp")
def test_op_count_of_a_captured_ppo_iteration_on_warp_ant_is_at_most_100():
    sys.path.insert(0, str(ROOT / "bench"))
    from micro import op_count

    eager, captured = op_count.count(8, capture=False), op_count.count(8, capture=True)
    assert captured <= 100 < eager, (captured, eager)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_WARP, reason="needs mujoco_warp")
def test_op_count_of_fast_td3_with_its_updates_captured_is_one_launch_for_the_updates():
    sys.path.insert(0, str(ROOT / "bench"))
    from micro import op_count

    eager = op_count.count_off_policy(8, capture=False)
    launches = dict(op_count.COUNT.ops)
    captured = op_count.count_off_policy(8, capture=True)
    assert sum(c for (phase, _), c in op_count.COUNT.ops.items() if phase == "update") == 0
    assert op_count.COUNT.ops[("graph", "replay")] == op_count.COUNTED
    # the step outside the graph is the eager one's
    outside = sum(c for (phase, _), c in launches.items() if phase != "update")
    assert captured == round(outside / op_count.COUNTED) + 1 < eager, (captured, eager)


# ---- on a GPU (pytest -m cuda) -------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("case", ["cartpole", "pendulum-normalized"])
def test_captured_loop_matches_the_eager_loop_on_cuda(case, monkeypatch, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    kw = dict(CASES[case], device="cuda")
    made, captured = _ppo_run(monkeypatch, tmp_path / "captured", False, **kw)
    assert made[0].captured and made[0].replays == 3, made[0].why_eager
    made, eager = _ppo_run(monkeypatch, tmp_path / "eager", False, capture=False, **kw)
    assert not made[0].captured
    a, b = checkpoint_params(captured["checkpoint"]), checkpoint_params(eager["checkpoint"])
    worst = max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
    assert worst < 1e-4, f"captured vs eager parameters differ by up to {worst}"


@pytest.mark.cuda
def test_captured_loop_replays_on_mujoco_warp(monkeypatch, tmp_path):
    if not torch.cuda.is_available() or not HAVE_WARP:
        pytest.skip("needs CUDA and mujoco_warp")
    kw = dict(CASES["ant-warp"], device="cuda", num_envs=256, total_steps=256 * 8 * 6)
    made, out = _ppo_run(monkeypatch, tmp_path, False, **kw)
    assert made[0].captured and made[0].replays == 4, made[0].why_eager
    # Warp's step and reset launched between the iteration's graphs, not recorded into them
    assert made[0].cuts == 2 * kw["num_steps"], made[0].cuts
    assert all(
        bool(torch.isfinite(v.float()).all()) for v in checkpoint_params(out["checkpoint"]).values()
    )


@pytest.mark.cuda
def test_nan_stops_a_captured_run(monkeypatch, tmp_path):
    """NaN written into the env's state between two replays: the guard's on-device flag (inside the
    graph) names the observations within two iterations."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from common.logger import Logger

    made_envs, ticks = [], [0]
    make, burn_in = envs.make, Logger.burn_in

    def keep(*a, **k):
        made_envs.append(make(*a, **k))
        return made_envs[-1]

    def poison_after_four(self, step, learned=True):
        ticks[0] += 1
        if ticks[0] == 4:
            made_envs[0].unwrapped.state[0, 0] = float("nan")
        return burn_in(self, step, learned)

    monkeypatch.setattr(envs, "make", keep)
    monkeypatch.setattr(Logger, "burn_in", poison_after_four)
    kw = dict(CASES["cartpole"], device="cuda", total_steps=16 * 8 * 12)
    with pytest.raises(FloatingPointError, match="in the observations"):
        _ppo_run(monkeypatch, tmp_path, False, **kw)
    # host at most 2 ahead
    assert ticks[0] <= 7, f"poisoned after iteration 4, reported after {ticks[0]}"


@pytest.mark.cuda
def test_a_numpy_env_on_cuda_trains_eagerly_with_one_warning(monkeypatch, tmp_path):
    """A gymnasium env stepping in numpy (envs.gym_adapter), the policy on CUDA: its observations
    are copied from the host each step, which a graph would replay as they were when recorded; the
    check names the copy, and the run goes on eagerly."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("mujoco")
    kw = dict(
        env="InvertedPendulum-v5",
        num_envs=4,
        num_steps=8,
        num_minibatches=2,
        total_steps=4 * 8 * 5,
        device="cuda",
    )
    with pytest.warns(UserWarning, match="a host tensor"):
        made, out = _ppo_run(monkeypatch, tmp_path, False, **kw)
    assert not made[0].captured and out["steps"] == 4 * 8 * 5


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["fast_td3", "td3", "sac", "redq"])
def test_captured_off_policy_updates_match_the_eager_ones_on_cuda(name, monkeypatch, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    algo = importlib.import_module(f"algos.{name}")
    kw = dict(TD3, device="cuda")
    made, captured = _ppo_run(monkeypatch, tmp_path / "captured", False, algo=algo, **kw)
    assert made[0].captured and made[0].replays == 8, made[0].why_eager
    made, eager = _ppo_run(monkeypatch, tmp_path / "eager", False, algo=algo, capture=False, **kw)
    assert not made[0].captured
    a, b = checkpoint_params(captured["checkpoint"]), checkpoint_params(eager["checkpoint"])
    worst = max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
    assert worst < 1e-4, f"captured vs eager parameters differ by up to {worst}"


@pytest.mark.cuda
def test_a_captured_sample_reaches_the_rows_added_after_the_capture():
    """The buffer's fill is read on the device: a graph recorded when 8 rows were filled samples
    all 1000 once they are."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from common.buffers import ReplayBuffer

    rb = ReplayBuffer(1000, torch.zeros(1, 1, device="cuda"), torch.zeros(1, device="cuda"))
    rows = torch.arange(1000.0, device="cuda")[:, None]

    def add(lo, hi):
        rb.add(rows[lo:hi], rows[lo:hi, 0], rows[lo:hi, 0], rows[lo:hi], rows[lo:hi, 0] * 0)

    add(0, 8)
    out = torch.zeros(4096, dtype=torch.long, device="cuda")
    rb.sample_indices(4096)  # the kernels load before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out.copy_(rb.sample_indices(4096))
    graph.replay()
    assert int(out.max()) < 8
    add(8, 1000)
    graph.replay()
    assert int(out.max()) >= 900 and int(out.min()) >= 0, (int(out.min()), int(out.max()))
