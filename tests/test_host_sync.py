"""The training loop makes no host sync between logging ticks (DESIGN.md: "the hot loop stays on
the device"; issue 9).

How the guard works. A host sync is anything that makes Python wait for a tensor's value. We
count two kinds of events while `main(Args(...))` runs:

* calls of the Python-level reads `Tensor.item / tolist / cpu / numpy / __bool__ / __float__ /
  __int__ / __index__` (monkeypatched on `torch.Tensor` for the duration of the test), and
* every `aten._local_scalar_dense` (what `.item()`, `bool(t)`, `if t:` ... become inside torch,
  from C++ too), every op whose output shape depends on tensor values (`nonzero`,
  `masked_select`, boolean-mask indexing ...: a device sync on CUDA) and every tensor made from
  host numbers (`aten.lift_fresh`, `torch.tensor([...])`: on CUDA a blocking copy), seen by a
  `TorchDispatchMode`.

An event counts when the Python stack at that moment holds a frame of this repository's code
(`algos/`, `common/`, `envs/`), except (a) under `torch/optim/` (a non-capturable Adam keeps its
step counter as a CPU tensor and reads it with `.item()`: no device involved; with `--device cuda`
and `capturable=True` the counter stays on the device), and (b) the envs' CPU action validation
(`ActionChecks._validate`: on CPU the bad-action check is immediate by design, on an accelerator
it is deferred to the logging tick), and (c) `NumericGuard.watch` on CPU (the NaN/Inf guard reads
its sums at once on CPU; on an accelerator it keeps an on-device flag that `check` copies without
waiting).

Logging ticks are time-based (every ~1 s) plus evaluation/checkpoints at `eval_every` /
`save_every` and at the end. The test freezes the clock of `common.logger.Ticks`
(`time.perf_counter` returns a constant, so no time-based tick fires), sets
`eval_every = save_every = 0` (one tick at the end) and stubs the evaluation (run at the tick: its
episode lengths, hence its syncs, depend on the policy). Then it runs each algorithm for a short and
a longer budget: the event counts must be equal. A host sync in the loop would add at least one
event per iteration to the longer run.

Not covered: algos/modsac.py, whose adaptive policy delay is by design a host decision read from the
critic-loss EMA once every `--mod-period` updates (documented there), the `--target-kl` early stop
of the PPO files (an opt-in, documented sync per epoch), and `--pipeline` / torchrun runs.
"""

from __future__ import annotations

import importlib
import sys
import time
import types
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
OURS = tuple(str(ROOT / d) + "/" for d in ("algos", "common", "envs"))
# optim/ as a frame names it and as it resolves (a venv reached through a symlink names the
# unresolved path)
TORCH_OPTIM = tuple(
    {
        str(p.parent) + "/optim/"
        for p in (Path(torch.__file__).absolute(), Path(torch.__file__).resolve())
    }
)
THIS = str(Path(__file__).resolve())
METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")
aten = torch.ops.aten
DYNAMIC_SHAPE = {
    aten.nonzero.default,
    aten.masked_select.default,
    aten.unique_consecutive.default,
    aten._unique2.default,
    aten.repeat_interleave.Tensor,
    aten.masked_scatter.default,
    # a tensor made from host numbers (`torch.tensor([...], device=...)`): on CUDA a copy from
    # pageable memory that waits for the GPU (an H200 run found Pendulum's reset doing it every
    # step)
    aten.lift_fresh.default,
}


def _site(frame) -> str | None:
    """file:line of the innermost frame of ours on the stack, or None when the event does not
    count."""
    site = None
    while frame is not None:
        f = frame.f_code.co_filename
        if f.startswith(TORCH_OPTIM):
            return None  # Adam's host-side step counter (see the module docstring)
        if f.startswith(OURS):
            if frame.f_code.co_name == "_validate" and f.endswith("envs/base.py"):
                return None  # the CPU action validation, by design
            if frame.f_code.co_name == "watch" and f.endswith("common/guard.py"):
                # NumericGuard on CPU checks at once, by design (deferred on an accelerator)
                return None
            if site is None:
                site = f"{Path(f).relative_to(ROOT)}:{frame.f_lineno} ({frame.f_code.co_name})"
        frame = frame.f_back
    return site


class SyncCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.events: Counter = Counter()

    def record(self, what: str, frame) -> None:
        site = _site(frame)
        if site is not None:
            self.events[f"{what} at {site}"] += 1

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten._local_scalar_dense.default:
            self.record("_local_scalar_dense", sys._getframe(1))
        elif func in DYNAMIC_SHAPE or (
            func is aten.index.Tensor
            and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1])
        ):
            self.record(str(func), sys._getframe(1))
        return func(*args, **kwargs)


@pytest.fixture
def sync_counter(monkeypatch):
    counter = SyncCounter()
    for name in METHODS:
        original = getattr(torch.Tensor, name)

        def wrapper(self, *a, __original=original, __name=name, **k):
            counter.record(f".{__name}()", sys._getframe(1))
            return __original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, wrapper)
    return counter


class FrozenClock(types.ModuleType):
    """The `time` module with `perf_counter` stopped: no time-based logging tick fires."""

    def __init__(self):
        super().__init__("time")
        self.__dict__.update({k: getattr(time, k) for k in dir(time) if not k.startswith("__")})
        self.perf_counter = lambda: 0.0


def fake_evaluate(*args, **kwargs):
    return {"eval_return": 0.0, "eval_return_std": 0.0, "eval_length": 0.0, "returns": [0.0]}


# (algorithm, env, settings, iterations of the short and the long run); tiny networks and batches
ON_POLICY = dict(num_envs=4, num_steps=8, num_minibatches=2, update_epochs=2, hidden=(16,))
OFF_POLICY = dict(num_envs=2, batch_size=16, hidden=(16,), buffer_size=1000, learning_starts=4)
CASES = {
    "ppo_vec": ("CartPole-v1", ON_POLICY, 32),
    "ppo_vec-pendulum-norm": ("Pendulum-v1", dict(ON_POLICY, norm_obs=True, norm_reward=True), 32),
    "ppo_vec-adaptive-lr": ("Pendulum-v1", dict(ON_POLICY, lr_schedule="adaptive"), 32),
    "a2c": ("CartPole-v1", dict(num_envs=4, num_steps=8, hidden=(16,)), 32),
    "ppo_h": ("Pendulum-v1", ON_POLICY, 32),
    "ppo_beta": ("Pendulum-v1", ON_POLICY, 32),  # the Beta draws and log-densities
    "ppo_rnn": ("CartPole-v1", dict(ON_POLICY, rnn_hidden=8), 32),
    "dqn": ("CartPole-v1", dict(OFF_POLICY, target_every=2), 2),
    "dqn-per": ("CartPole-v1", dict(OFF_POLICY, target_every=2, per=True), 2),
    "double_dqn": ("CartPole-v1", dict(OFF_POLICY, target_every=2), 2),
    "d3qn": ("CartPole-v1", dict(OFF_POLICY, target_every=2), 2),
    "pqn": (
        "CartPole-v1",
        dict(num_envs=4, num_steps=8, num_minibatches=2, update_epochs=2, hidden=(16,)),
        32,
    ),
    "sac": ("Pendulum-v1", OFF_POLICY, 2),
    "sac-per": ("Pendulum-v1", dict(OFF_POLICY, per=True), 2),
    "td3": ("Pendulum-v1", OFF_POLICY, 2),
    "ddpg": ("Pendulum-v1", OFF_POLICY, 2),
    "redq": ("Pendulum-v1", OFF_POLICY, 2),
    "sac_h": ("Pendulum-v1", OFF_POLICY, 2),
    "td3_h": ("Pendulum-v1", OFF_POLICY, 2),
    "ddpg_h": ("Pendulum-v1", OFF_POLICY, 2),
}


def count_syncs(case: str, iterations: int, counter: SyncCounter, tmp_path, monkeypatch) -> Counter:
    env, settings, steps_per_iter = CASES[case]
    mod = importlib.import_module("algos." + case.split("-")[0])
    import common.logger

    monkeypatch.setattr(common.logger, "time", FrozenClock())  # Ticks: no time-based logging tick
    if hasattr(mod, "time"):
        monkeypatch.setattr(mod, "time", FrozenClock())
    import common.run

    monkeypatch.setattr(common.run if hasattr(mod, "Run") else mod, "evaluate", fake_evaluate)
    fields = mod.Args.__dataclass_fields__
    settings = {k: v for k, v in settings.items() if k in fields}
    if "gradient_steps" in fields:
        settings.setdefault("gradient_steps", 1)
    args = mod.Args(
        env=env,
        seed=3,
        total_steps=iterations * steps_per_iter,
        eval_every=0,
        save_every=0,
        eval_episodes=2,
        quiet=True,
        out_dir=str(tmp_path / f"{case}-{iterations}"),
        device="cpu",
        **settings,
    )
    counter.events.clear()
    with counter:
        mod.main(args)
    return Counter(counter.events)


@pytest.mark.parametrize("case", list(CASES))
def test_no_host_sync_in_the_loop(case, sync_counter, tmp_path, monkeypatch):
    short = count_syncs(case, 4, sync_counter, tmp_path, monkeypatch)
    long = count_syncs(case, 12, sync_counter, tmp_path, monkeypatch)
    grown = {k: (short.get(k, 0), n) for k, n in long.items() if n > short.get(k, 0)}
    assert not grown, (
        f"{case}: host syncs that grow with the number of iterations (site: events in 4 vs 12 "
        f"iterations): {grown}"
    )
    assert sum(short.values()) > 0  # the guard sees the logging tick's reads (it is switched on)
