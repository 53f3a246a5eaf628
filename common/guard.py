"""`NumericGuard`: the NaN/Inf guard (docs/usage.md#nothing-lost)."""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path

import torch

from common.errors import Diverged


class NumericGuard:
    """Stops a run at the first NaN/Inf it watches, within one update, naming it, before it
    reaches a checkpoint. `watch(name, *tensors)` on CPU checks at once and raises; on an
    accelerator it folds "any non-finite?" into an on-device flag keeping the first bad name (no
    host sync), and `check(step)` starts a non-blocking copy of the flag and reads the previous one
    once landed: an eager loop never waits, and a NaN is reported an update late at most. A
    captured loop (common/graphs.py) runs ahead of the GPU: `check` waits for a copy two checks
    old. `check(step, sync=True)`, before each checkpoint write, waits: none holds a NaN."""

    def __init__(self, device, checkpoint: str | os.PathLike | None = None):
        self.device = torch.device(device)
        self.checkpoint = checkpoint
        self.names: list[str] = []
        # 0.0: all finite; k: names[k-1] went bad
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
            # one sum over the concatenation, not one per tensor
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
        # Few launches (a GPU run is bound by them): one check over the concatenation; `x * 0` is
        # NaN exactly where x is not finite, so the sum is NaN iff one is (and cannot overflow);
        # NaN -> this name's code, kept unless an earlier watch was bad
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
        """Report a non-finite value watched on an accelerator (on CPU `watch` already has)."""
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
