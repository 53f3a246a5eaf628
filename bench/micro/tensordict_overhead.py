"""What TensorDict would cost as the storage of named observation groups, on the peers table's rows.

Issue 56 asked for observations as named groups, "a dict of tensors or a TensorDict (what rsl_rl 5
and TorchRL use): measure its overhead on the peers table and pick". The files use
`common.storage.Batch`, a `dict` subclass. This trains the peers table's PPO and PQN rows (`ppo_vec`
and `pqn` on CartPole-v1) twice each, alternating: as they are, and as a private copy of the file
whose `Batch` is the same interface over `tensordict.TensorDict`. Both must train the same numbers
(the final evaluation and parameters are compared); the table is training env-steps/s, one thread.
tensordict is not a project dependency: `bash benchmark.sh tensordict` makes `bench/.venv-td` (the
project's own venv plus tensordict) and runs this there.

    bench/.venv-td/bin/python bench/micro/tensordict_overhead.py [--repeats 4] [--steps 100000]
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import statistics
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]  # the repo, bench/
from micro.timing import ROOT, alternating, machine, measured, parser, publish  # noqa: E402
from micro.timing import ratio, script, times  # noqa: E402

ROWS = {"ppo": "ppo_vec", "pqn": "pqn"}


@functools.cache
def td_batch():
    """`Batch`'s interface over TensorDict: construction infers the batch size, `zeros`,
    `minibatches` and `Batch`'s `flatten()` (added to TensorDict's methods, once); indexing,
    writing rows, `clone`, `copy_` and `update` are TensorDict's own."""
    from tensordict import TensorDict, TensorDictBase

    def minibatches(self, n: int):
        first = next(iter(self.values(include_nested=True, leaves_only=True)))
        size = self.batch_size[0]
        perm, step = torch.randperm(size, device=first.device), size // n
        for start in range(0, size, step):
            yield self[perm[start : start + step]]

    TensorDictBase.minibatches = minibatches
    flatten = TensorDictBase.flatten
    # `Batch.flatten()`: the first two dimensions (TensorDict's: every batch dimension)
    TensorDictBase.flatten = lambda self, *a, **k: (
        flatten(self, *a, **k) if a or k else flatten(self, 0, 1)
    )

    def zeros_like_lead(lead, x):
        if isinstance(x, (dict, TensorDictBase)):
            return {k: zeros_like_lead(lead, v) for k, v in x.items()}
        return x.new_zeros((*lead, *x.shape))

    class TD:
        def __new__(cls, source=None, **kw):
            data = {} if source is None else {k: source[k] for k in source.keys()}
            return TensorDict({**data, **kw}, batch_size=[]).auto_batch_size_()

        @staticmethod
        def zeros(*lead, **examples):
            data = {k: zeros_like_lead(lead, x) for k, x in examples.items()}
            return TensorDict(data, batch_size=list(lead)).auto_batch_size_()

    return TD


@functools.cache
def with_storage(algo: str, storage: str):
    """algos/ALGO.py itself ("dict"), or a private copy of it, run from the same file, whose
    `Batch` is `td_batch()` ("tensordict"): the library's own modules are never changed."""
    if storage == "dict":
        return importlib.import_module(f"algos.{algo}")
    path = ROOT / "algos" / f"{algo}.py"
    spec = importlib.util.spec_from_file_location(f"{algo}_tensordict", path)
    copy = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = copy  # (its dataclasses look their module up)
    spec.loader.exec_module(copy)
    copy.Batch = td_batch()  # the copy's own name: `main` reads it when it runs
    return copy


def run(algo: str, steps: int, storage: str) -> dict:
    module = with_storage(algo, storage)
    args = measured(module.default_args("CartPole-v1", device="cpu"), "tensordict", device="cpu",
                    total_steps=steps, tensorboard=False, plots=False)  # fmt: skip
    r = module.main(args)
    ckpt = torch.load(r["checkpoint"], weights_only=False)
    total = sum(float(v.double().sum()) for v in ckpt["model"].values())
    return dict(sps=r["steps"] / r["seconds"], eval=r["eval_return"], params=total)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--out", default="bench/results/tensordict.md", help="the table's path")
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--only", nargs="*", default=list(ROWS), choices=list(ROWS))
    a = p.parse_args()
    torch.set_num_threads(1)
    import tensordict

    lines = [
        f"{machine()}; tensordict {tensordict.__version__}; CartPole-v1, {a.steps:,} steps, "
        f"medians of {a.repeats}, one thread; the ratio's 95% bootstrap interval in brackets",
        "",
        "| row | file | Batch (dict) env-steps/s | TensorDict env-steps/s | ratio | same run |",
        "|---|---|---:|---:|---:|---|",
    ]
    for row in a.only:
        sides = {s: functools.partial(run, ROWS[row], a.steps, s) for s in ("dict", "tensordict")}
        got = alternating(a.repeats, **sides)
        same = len({(r["eval"], r["params"]) for r in got["dict"] + got["tensordict"]}) == 1
        d, t = ([r["sps"] for r in got[s]] for s in ("dict", "tensordict"))
        medians = f"{statistics.median(d):,.0f} | {statistics.median(t):,.0f}"
        cells = f"{medians} | {times(ratio(t, d))} | {'yes' if same else 'NO'}"
        lines.append(f"| {row} | {ROWS[row]} | {cells} |")
        print(lines[-1], flush=True)
    publish("\n".join(lines), a.out)


if __name__ == "__main__":
    script(main)
