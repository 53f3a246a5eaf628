"""`Batch`: named tensors (or nested batches, e.g. an observation's groups) that share their
leading dimensions, written and indexed as one:

    store = Batch.zeros(T, obs=obs, actions=action)  # [T, *x.shape] of each example x, its dtype
    store[t] = dict(obs=obs, actions=action)         # writes the entries given (copies, casts)
    mb = store.flatten()[idx]                        # [T * N] rows; the same rows of each entry

A plain `dict` underneath (compiled functions and CUDA graphs see plain tensors): a string key is a
name; anything else (an int, a slice, an index tensor, a tuple of them) indexes every tensor.
"""

from __future__ import annotations

import torch


class Batch(dict):
    """Named tensors (or batches) with common leading dimensions."""

    @staticmethod
    def zeros(*lead: int, **examples) -> Batch:
        """Zeros `[*lead, *x.shape]` for each named example `x` (a tensor or a dict of them), in
        its dtype and on its device."""
        return Batch._like(lead, examples, torch.Tensor.new_zeros)

    @staticmethod
    def empty(*lead: int, **examples) -> Batch:
        """As `zeros`, uninitialized (memory touched only where written)."""
        return Batch._like(lead, examples, torch.Tensor.new_empty)

    @staticmethod
    def _like(lead: tuple, examples: dict, new) -> Batch:
        return Batch(
            {
                k: Batch._like(lead, x, new) if isinstance(x, dict) else new(x, (*lead, *x.shape))
                for k, x in examples.items()
            }
        )

    @staticmethod
    def cat(batches: list) -> Batch:
        """The batches (dicts with the same names) one after the other along the first dimension."""
        parts = {k: [b[k] for b in batches] for k in batches[0]}
        return Batch(
            {k: Batch.cat(p) if isinstance(p[0], dict) else torch.cat(p) for k, p in parts.items()}
        )

    def __getitem__(self, key):
        if isinstance(key, str):
            return dict.__getitem__(self, key)
        return Batch({k: v[key] for k, v in self.items()})

    def __setitem__(self, key, value) -> None:
        if isinstance(key, str):
            dict.__setitem__(self, key, value)
            return
        for k, v in value.items():  # the entries given, into rows `key` (a batch: its own entries)
            dict.__getitem__(self, k)[key] = v

    def flatten(self, dims: int = 2) -> Batch:
        """The first `dims` dimensions of every tensor as one (views where the memory allows)."""
        return Batch(
            {
                k: v.flatten(dims) if isinstance(v, Batch) else v.flatten(0, dims - 1)
                for k, v in self.items()
            }
        )

    def minibatches(self, n: int):
        """One epoch: the rows (first dimension) in a fresh random order, as `n` equal
        minibatches."""
        first = next(iter(self.values()))
        while isinstance(first, dict):
            first = next(iter(first.values()))
        size = len(first)
        perm, step = torch.randperm(size, device=first.device), size // n
        for start in range(0, size, step):
            yield self[perm[start : start + step]]

    def copy_(self, other) -> Batch:
        """Copy `other`'s tensors (same names) into these, in place."""
        for k, v in self.items():
            v.copy_(other[k])
        return self

    def clone(self) -> Batch:
        return Batch({k: v.clone() for k, v in self.items()})

    def state_dict(self) -> dict:
        """Detached copies, nested as the batch is (a checkpoint entry)."""
        return {
            k: v.state_dict() if isinstance(v, Batch) else v.detach().clone()
            for k, v in self.items()
        }

    def load_state_dict(self, sd: dict) -> None:
        with torch.no_grad():
            for k, v in self.items():
                v.load_state_dict(sd[k]) if isinstance(v, Batch) else v.copy_(sd[k])
