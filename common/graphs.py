"""`Captured`: a training iteration (rollout, advantages, update) replayed as CUDA graphs, since a
small network's iteration on a GPU is bound by its kernel launches
(docs/scaling.md#one-cuda-graph-per-iteration).

A captured function takes no inputs and reads and writes fixed tensors (buffers, parameters,
optimizer moments, env state); it updates state in place (`copy_`, `out=`, `add_`), never by
rebinding an attribute, keeps no Python counter that must advance, never reads a value back to the
host nor copies data from it, and keeps its control flow; what it returns is the value of its last
eager call or of the capture. `Captured` runs it eagerly twice (lazy state; then `check`: nothing
rebound, no Python number changed, no host traffic), records it on the third call and replays it
after. A failed check leaves the loop eager with one warning; a capture that raises stops the run
naming the flag that runs it eagerly (a failed capture can leave CUDA's state broken). On a CPU
every call is eager, bit for bit.

Work with CUDA graphs of its own (MuJoCo Warp's step and reset) joins through `outside`: the graph
being recorded ends there, that work's own graph launches in its place on each replay, and recording
goes on in a new graph sharing the memory pool. An env's own `torch.Generator`s are registered with
every graph (`generators`), so a replay draws new numbers.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# the `Captured` recording now (or, `simulate`, standing in for a replay): where `outside` cuts
_recording: Captured | None = None

# leaves of `check`'s walk: not this loop's state to check (a module's parameters are updated in
# place by the optimizer), or a simulator's own handles
_OPAQUE = (
    "torch",
    "numpy",
    "gymnasium",
    "warp",
    "mujoco",
    "builtins",
    "threading",
    "collections",
    "typing",
)


def _walk(obj, path: str, out: dict, seen: set, depth: int = 0) -> None:
    """Every tensor and Python number reachable from `obj`, by path."""
    if isinstance(obj, torch.Tensor):
        out[path] = obj
        return
    if isinstance(obj, (bool, int, float)):
        out[path] = obj
        return
    if (
        id(obj) in seen
        or depth > 12
        or obj is None
        or isinstance(obj, (str, bytes, torch.nn.Module))
    ):
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Generator):
        out[path] = obj
        return
    if isinstance(obj, dict):
        items = [
            (f"{path}[{k!r}]" if isinstance(k, (str, int)) else f"{path}[{i}]", v)
            for i, (k, v) in enumerate(obj.items())
        ]
    elif isinstance(obj, (list, tuple)):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    elif hasattr(obj, "__dict__") and not type(obj).__module__.startswith(_OPAQUE):
        items = [(f"{path}.{k}", v) for k, v in vars(obj).items()]
        # a wrapper whose inner env is a property
        if hasattr(obj, "env") and "env" not in vars(obj):
            items.append((f"{path}.env", obj.env))
    else:
        return
    for p, v in items:
        _walk(v, p, out, seen, depth + 1)


def snapshot(state: Iterable) -> dict:
    """{path: tensor object, Python number or generator} for everything reachable from `state`."""
    out: dict = {}
    seen: set = set()
    for i, obj in enumerate(state):
        _walk(
            obj,
            type(obj).__name__ if not isinstance(obj, (dict, list, tuple)) else f"state[{i}]",
            out,
            seen,
        )
    return out


def rebound(before: dict, after: dict) -> list[str]:
    """Paths whose tensor is another object now, whose number changed, or that appeared or went."""
    changed = []
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path), after.get(path)
        if (
            isinstance(a, torch.Tensor)
            or isinstance(b, torch.Tensor)
            or isinstance(a, torch.Generator)
        ):
            if a is not b:
                changed.append(path)
        elif a != b and not (a != a and b != b):  # NaN == NaN here
            changed.append(path)
    return changed


class _HostTraffic(TorchDispatchMode):
    """The ops that read a value back to the host (`.item()`, `if t:`) or take a host tensor: a
    graph would replay the value of the recording."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name == "_local_scalar_dense":
            self._add(f"{name} (a value read on the host: .item(), bool(), float())")
        else:
            flat = [
                x
                for a in (*args, *(kwargs or {}).values())
                for x in (a if isinstance(a, (list, tuple)) else [a])
            ]
            tensors = [t for t in flat if isinstance(t, torch.Tensor)]
            if any(t.device.type == "cpu" and t.dim() > 0 for t in tensors):
                self._add(f"{name} (a host tensor: data copied from the CPU)")
        return func(*args, **(kwargs or {}))

    def _add(self, what: str) -> None:
        if what not in self.found:
            self.found.append(what)


def check(fn: Callable[[], None], state: Iterable, device=None) -> list[str]:
    """Run `fn` once; what it rebound or changed in `state` and, on an accelerator, its host
    traffic (empty: safe to capture)."""
    state = list(state)
    before = snapshot(state)
    if device is None or torch.device(device).type == "cpu":
        fn()
        return rebound(before, snapshot(state))
    with _HostTraffic() as traffic:
        fn()
    return rebound(before, snapshot(state)) + traffic.found


def generators(state: Iterable, device: torch.device) -> list[torch.Generator]:
    """The `torch.Generator`s on `device` reachable from `state` (an env's own random stream)."""
    return [
        g for g in snapshot(state).values() if isinstance(g, torch.Generator) and g.device == device
    ]


def outside(launch: Callable[[], None]) -> bool:
    """Called where work with CUDA graphs of its own would run: while a capture records, cut its
    graph here so that `launch()` runs in this place on every replay, and return True (the caller
    runs nothing now); otherwise False (the caller runs its work now)."""
    rec = _recording
    if rec is None:
        return False
    rec.cuts += 1
    if rec.device.type != "cuda" or not torch.cuda.is_current_stream_capturing():
        return False  # `simulate`: a GPU would launch a graph here and start another
    rec._cut(launch)
    return True


class Captured:
    """`fn()` as CUDA graphs on CUDA after two eager calls (module docstring); eager elsewhere.
    `simulate = True` (tests; a subclass, bench/micro/op_count.py) takes the CUDA path on any
    device, with `_stand_in` running `fn` eagerly where a GPU would replay (`launches` counted)."""

    simulate = False

    def __init__(
        self,
        fn: Callable[[], None],
        device,
        state: Iterable = (),
        enabled: bool = True,
        name: str = "iteration",
        off_flag: str = "--no-capture",
    ):
        self.fn, self.name, self.off_flag = fn, name, off_flag
        self.device = torch.device(device)
        self.state = list(state)
        self.enabled = enabled and (self.device.type == "cuda" or self.simulate)
        self.calls = 0
        self.replays = 0
        self.result = None
        # a replay, in order: each graph's `replay` and each `outside` launch between them
        self.pieces: list[Callable[[], None]] | None = None
        self.cuts = 0  # `outside` calls in the capture (or in the last stand-in)
        # host seconds of the capture: running `fn` under it, and instantiating the graphs
        self.record_s = self.instantiate_s = None
        self.why_eager: str | None = (
            None if self.enabled else "not on CUDA" if enabled else "turned off"
        )

    @property
    def captured(self) -> bool:
        return self.pieces is not None

    @property
    def launches(self) -> int:
        """Launches a replay makes: a graph, and a launch and a graph per cut."""
        return 1 + 2 * self.cuts

    def __call__(self):
        if self.pieces is not None:
            self._replay()
            return self.result
        if not self.enabled:
            return self.fn()
        self.calls += 1
        if self.calls == 1:
            self.result = self.fn()
        elif self.calls == 2:
            changed = check(self._run, self.state, self.device)
            if changed:
                shown = ", ".join(changed[:4]) + (
                    f" and {len(changed) - 4} more" if len(changed) > 4 else ""
                )
                self._eager(
                    f"{shown}: a replay would not redo it (state rebound or a Python number "
                    "changed between two calls, or the host in the loop); state written in place "
                    "(copy_, out=, add_) and no host data allow capture"
                )
        elif self.device.type != "cuda":
            self._recorded(self._stand_in)
            self.replays += 1
        else:
            self._capture()
        return self.result

    def _run(self) -> None:
        self.result = self.fn()

    def _replay(self) -> None:
        for piece in self.pieces:
            piece()
        self.replays += 1

    def _recorded(self, run: Callable[[], None]) -> None:
        """`run()` with this object as the recording `outside` cuts."""
        global _recording
        self.cuts, _recording = 0, self
        try:
            run()
        finally:
            _recording = None

    def _stand_in(self) -> None:
        """Where a GPU replays the graphs (`simulate`): `fn`, eagerly."""
        self._run()

    def _eager(self, why: str) -> None:
        self.enabled, self.why_eager = False, why
        warnings.warn(
            f"CUDA graph capture of the {self.name} is off, it runs eagerly: {why}", stacklevel=3
        )

    def _begin(self) -> None:
        graph = torch.cuda.CUDAGraph()
        # an env's own random stream advances on each replay
        for g in self._generators:
            graph.register_generator_state(g)
        graph.capture_begin(pool=self._pool, capture_error_mode="thread_local")
        self._graph = graph

    def _end(self) -> None:
        graph, self._graph = self._graph, None
        start = time.perf_counter()
        graph.capture_end()  # instantiates it
        self.instantiate_s += time.perf_counter() - start
        self._pieces.append(graph.replay)

    def _cut(self, launch: Callable[[], None]) -> None:
        self._end()
        self._pieces.append(launch)
        self._begin()

    def _capture(self) -> None:
        # `torch.cuda.graph` by hand, so that `outside` can end one graph and begin the next: a side
        # stream, one memory pool for all (they replay in order: what one writes is there for the
        # next)
        self._pieces, self._graph, self.instantiate_s = [], None, 0.0
        self._pool = torch.cuda.graph_pool_handle()
        self._generators = generators(self.state, self.device)
        torch.cuda.synchronize(self.device)
        stream = torch.cuda.Stream(self.device)
        start = time.perf_counter()
        try:
            with torch.cuda.stream(stream):
                self._begin()
                self._recorded(self._run)
                self._end()
        except Exception as e:
            if self._graph is not None:  # end the broken capture, so that CUDA can go on
                with contextlib.suppress(Exception), torch.cuda.stream(stream):
                    self._graph.capture_end()
            first = str(e).splitlines()[0] if str(e) else ""
            raise RuntimeError(
                f"CUDA graph capture of the {self.name} failed ({type(e).__name__}: {first}); "
                f"run it eagerly with {self.off_flag}"
            ) from e
        self.record_s = time.perf_counter() - start - self.instantiate_s
        self.pieces = self._pieces
        torch.cuda.current_stream(self.device).wait_stream(stream)
        self._replay()  # recording ran nothing: this call's work
