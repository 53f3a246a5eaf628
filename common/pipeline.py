"""Explore and learn at the same time, in lockstep segments (docs/scaling.md, pipeline parallelism):
`explore()` in a persistent worker thread, `learn()` in the calling thread (torch ops release the
GIL). On CUDA the explorer has its own stream, joined at every handoff by device-side waits. The
algorithm file decides what is handed over between segments and nothing else is shared, so results
do not depend on how the threads interleave.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import torch

__all__ = ["Pipeline", "flush"]


class Pipeline:
    """Runs explore (worker thread) and learn (calling thread) at once, one segment per `run`."""

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="explorer")
        self._reset()

    def _reset(self) -> None:
        self._span = None  # (first segment start, last segment end) since the last stats()
        self._explore = self._learn = self._both = 0.0

    def _explore_timed(self, fn, main_stream):
        t0 = time.perf_counter()
        if self.stream is None:
            out = fn()
        # after the main stream's handoff (buffer writes, actor copy), on our own stream
        else:
            self.stream.wait_stream(main_stream)
            with torch.cuda.stream(self.stream):
                out = fn()
        return out, t0, time.perf_counter()

    def run(self, explore, learn):
        """`(explore(), learn())`, both at once; re-raises their errors."""
        main = torch.cuda.current_stream(self.device) if self.stream is not None else None
        future = self._pool.submit(self._explore_timed, explore, main)
        l0 = time.perf_counter()
        try:
            learned = learn()
        finally:  # the explorer always finishes its segment before anything else touches the env
            l1 = time.perf_counter()
            explored, x0, x1 = future.result()
        if main is not None:
            main.wait_stream(self.stream)
        self._explore += x1 - x0
        self._learn += l1 - l0
        self._both += max(0.0, min(x1, l1) - max(x0, l0))
        start = min(x0, l0) if self._span is None else self._span[0]
        self._span = (start, max(x1, l1))
        return explored, learned

    def stats(self) -> dict:
        """`pipeline_overlap` (both busy), `explore_busy`, `learn_busy` since the last call (which
        resets them): fractions of the wall time from the first segment's start to the last one's
        end (evaluation between segments left out); host-side times, not GPU utilization."""
        wall = self._span[1] - self._span[0] if self._span is not None else 0.0
        out = (
            {
                "pipeline_overlap": self._both / wall,
                "explore_busy": self._explore / wall,
                "learn_busy": self._learn / wall,
            }
            if wall > 0
            else {}
        )
        self._reset()
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def flush(stage, rb) -> None:
    """Move the transitions staged in the replay buffer `stage` into `rb`, in order; empty
    `stage`."""
    n = stage.size
    if n:
        rb.add(**stage.data[:n])
    stage.pos = stage.size = 0
    stage.filled.zero_()  # the on-device fill too (ReplayBuffer.sample_indices)
