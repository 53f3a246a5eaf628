"""`NumericGuard`: NaN/Inf in observations, rewards, losses or parameters stops the run within one
update, naming the quantity, and never reaches a checkpoint."""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path

import torch

from common.errors import Diverged


class NumericGuard:
    """Stops a run at the first NaN/Inf in what it watches (observations, rewards, losses,
    parameters), within one update, naming the quantity, before a bad value reaches a checkpoint.

    `watch(name, *tensors)` checks the tensors. On CPU it reads the answer at once (one sum per
    tensor; there is no device to wait for) and raises `FloatingPointError` there. On an accelerator
    it folds "is any of these non-finite?" into an on-device flag that keeps the first bad name (no
    host sync), and `check(step)` reports it: it starts a non-blocking copy of the flag and reads
    the copy the previous `check` started once that copy has landed, so an eager loop never waits
    and a NaN is reported an update late at most. A loop replayed as a CUDA graph (common/graphs.py)
    queues work faster than the GPU runs it: there `check` waits for a copy two checks old, which
    keeps the host at most two updates ahead (the GPU still has them queued: no idle time) and the
    report as prompt. `check(step, sync=True)`, called before every checkpoint write, waits: a
    checkpoint never holds a non-finite value, and the last one written before the error stays the
    last good one.
    """

    def __init__(self, device, checkpoint: str | os.PathLike | None = None):
        self.device = torch.device(device)
        self.checkpoint = checkpoint
        self.names: list[str] = []
        # 0.0: all finite; k: names[k-1] went bad (float32)
        self.first = torch.zeros((), device=self.device)
        self._host = self._event = None
        self._pending = 0  # checks since the copy in flight started
        self._last_step = 0
        self._lock = threading.Lock()  # --pipeline: the explorer thread watches too
        self._params: dict = {}  # module -> its parameters (watch_params)
        if self.device.type == "cuda":
            self._host = torch.zeros(()).pin_memory()
            self._event = torch.cuda.Event()

    def watch(self, name: str, *tensors: torch.Tensor) -> None:
        if name not in self.names:
            self.names.append(name)
        code = self.names.index(name) + 1
        # observation groups
        tensors = [v for t in tensors for v in (t.values() if isinstance(t, dict) else [t])]
        floats = [t for t in tensors if t.is_floating_point()]
        if not floats:
            return
        # a NaN/Inf makes the sum non-finite (a finite overflow is re-checked)
        if self.device.type == "cpu":
            # several tensors: one sum over their concatenation (one kernel, not one per tensor)
            total = (
                floats[0].sum()
                if len(floats) == 1
                else torch.cat([t.flatten() for t in floats]).sum()
            )
            if not math.isfinite(total.item()) and not all(
                bool(torch.isfinite(t).all()) for t in floats
            ):
                self._raise(code, None)
            return
        # A GPU run is bound by kernel launches: one check over the concatenation (a check per
        # tensor cost ~7 launches for each of a network's parameter tensors after every minibatch),
        # and `x * 0` is 0 where x is finite and NaN where it is NaN or Inf, so the sum is NaN
        # exactly when one is not finite (and it cannot overflow); NaN -> this name's code, 0 stays
        # 0; kept unless an earlier watch was bad: 5 kernels in all
        with torch.no_grad():  # parameters too: no autograd record (and `out=` below refuses one)
            flat = floats[0] if len(floats) == 1 else torch.cat([t.flatten() for t in floats])
            bad = flat.mul(0).sum().nan_to_num(nan=code).to(torch.float32)
        with self._lock, torch.no_grad():
            # in place: captured graphs replay it
            torch.where(self.first == 0, bad, self.first, out=self.first)

    def watch_params(self, name: str, modules) -> None:
        """`watch` every parameter of `modules` (one module or several)."""
        modules = modules if isinstance(modules, (list, tuple)) else [modules]
        params = []
        # a module's parameters, collected once (`parameters()` walks the module tree every call)
        for m in modules:
            if m not in self._params:
                self._params[m] = list(m.parameters())
            params += self._params[m]
        self.watch(name, *params)

    def check(self, step: int, sync: bool = False) -> None:
        """Report a non-finite value watched on an accelerator (on CPU `watch` has reported it
        already)."""
        code = 0
        if self.device.type != "cpu":
            if sync:
                code = int(self.first.item())
            elif self._event is not None:
                self._pending += 1
                # the host ran ahead (a captured loop): wait
                if not self._event.query() and self._pending >= 2:
                    self._event.synchronize()
                if self._event.query():  # the copy landed: read it, start the next
                    code = int(self._host.item())
                    self._host.copy_(self.first, non_blocking=True)
                    self._event.record()
                    self._pending = 0
        if code:
            self._raise(code, step)
        self._last_step = step

    def _raise(self, code: int, step: int | None) -> None:
        if step is None:
            where = f"after env step {self._last_step:,}"
        else:
            where = (
                f"between env steps {self._last_step:,} and {step:,}"
                if step > self._last_step
                else f"at env step {step:,}"
            )
        kept = "no checkpoint was written yet (a lower --learning-rate helps if the losses blew up)"
        if self.checkpoint is not None and Path(self.checkpoint).is_file():
            saved = torch.load(self.checkpoint, map_location="cpu", weights_only=False).get(
                "global_step", "?"
            )
            kept = (
                f"{self.checkpoint} (env step {saved}) is the last good checkpoint, kept as it "
                f"was: resume from it with --resume {self.checkpoint} (a lower --learning-rate "
                "helps if the losses blew up)"
            )
        raise Diverged(
            f"non-finite value (NaN or Inf) in the {self.names[code - 1]} {where}, the first of "
            f"the watched quantities ({', '.join(self.names)}) to go bad; the run stopped: {kept}. "
            "If the env produced it, check its observations and rewards (a NaN there is a bug in "
            "the env or its inputs)."
        )
