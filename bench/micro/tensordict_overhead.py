"""What TensorDict would cost as the storage of named observation groups, on the peers table's rows.

Issue 56 asked for observations as named groups, "a dict of tensors or a TensorDict (what rsl_rl 5
and TorchRL use): measure its overhead on the peers table and pick". The files use
`common.storage.Batch`, a `dict` subclass. This script trains the peers table's PPO and PQN rows
(`ppo_vec` and `pqn` on CartPole-v1 with their own defaults) twice each, alternating: as they are,
and as a private copy of the file (`with_storage`; the library's modules stay as they are) whose
`Batch` is the same interface over `tensordict.TensorDict` (`TD` below: construction infers the
batch size, `zeros`, `minibatches`; indexing, writing rows, `flatten`, `clone`, `copy_` and
`update` are TensorDict's own). Both train the same numbers (the
script checks the final evaluation and parameters are equal); the table is training env-steps per
second, one thread, medians over the repeats.

tensordict is not a project dependency: run it with an interpreter that has it, e.g.
`bench/.venv-td` (`bash benchmark.sh tensordict` makes it: the project's own venv plus tensordict).

    bench/.venv-td/bin/python bench/micro/tensordict_overhead.py [--repeats 4] [--steps 100000]
"""

from __future__ import annotations

import datetime
import functools
import importlib
import importlib.util
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import torch

# the repository and bench/
sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]
from micro.timing import ROOT, alternating, machine, parser, script  # noqa: E402

ROWS = {"ppo": "ppo_vec", "pqn": "pqn"}


@functools.cache
def td_batch():
    """`Batch`'s interface over TensorDict (imported here: only this script needs tensordict);
    made once, as it adds `minibatches` and `Batch`'s `flatten()` to TensorDict's methods."""
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
    `Batch` is `TD` ("tensordict"): the library's own modules are never changed."""
    if storage == "dict":
        return importlib.import_module(f"algos.{algo}")
    spec = importlib.util.spec_from_file_location(
        f"{algo}_tensordict", ROOT / "algos" / f"{algo}.py"
    )
    copy = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = copy  # (its dataclasses look their module up)
    spec.loader.exec_module(copy)
    copy.Batch = td_batch()  # the copy's own name: `main` reads it when it runs
    return copy


def run(algo: str, steps: int, storage: str, seed: int = 1) -> dict:
    module = with_storage(algo, storage)
    args = replace(
        module.default_args("CartPole-v1", device="cpu"),
        seed=seed,
        total_steps=steps,
        eval_every=0,
        save_every=0,
        quiet=True,
        tensorboard=False,
        plots=False,
        device="cpu",
        out_dir=str(ROOT / "bench" / "runs" / "tensordict"),
    )
    r = module.main(args)
    ckpt = torch.load(r["checkpoint"], weights_only=False)
    total = sum(float(v.double().sum()) for v in ckpt["model"].values())
    return dict(sps=r["steps"] / r["seconds"], eval=r["eval_return"], params=total)


def main() -> str:
    p = parser(__doc__)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--only", nargs="*", default=list(ROWS), choices=list(ROWS))
    a = p.parse_args()
    torch.set_num_threads(1)
    import tensordict

    rows = []
    for row in a.only:
        algo = ROWS[row]
        sides = {s: functools.partial(run, algo, a.steps, s) for s in ("dict", "tensordict")}
        got = alternating(a.repeats, **sides)
        same = {(r["eval"], r["params"]) for r in got["dict"] + got["tensordict"]}
        d, t = (statistics.median(r["sps"] for r in got[s]) for s in ("dict", "tensordict"))
        rows.append((row, algo, d, t, len(same) == 1))
        print(f"{row}: dict {d:,.0f} env-steps/s, TensorDict {t:,.0f} ({t / d:.2f}x)", flush=True)
    lines = [
        f"{datetime.date.today()}; {machine()}; tensordict {tensordict.__version__}; "
        f"CartPole-v1, {a.steps:,} steps, medians of {a.repeats}, one thread",
        "",
        "| row | file | Batch (dict) env-steps/s | TensorDict env-steps/s | ratio | same run |",
        "|---|---|---:|---:|---:|---|",
    ]
    for row, algo, d, t, same in rows:
        lines.append(
            f"| {row} | {algo} | {d:,.0f} | {t:,.0f} | {t / d:.2f}x | {'yes' if same else 'NO'} |"
        )
    print("\n" + "\n".join(lines))
    return "\n".join(lines)


if __name__ == "__main__":
    script(main, "tensordict")
