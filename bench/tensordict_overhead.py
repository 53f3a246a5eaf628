"""What TensorDict would cost as the storage of named observation groups, on the peers table's rows.

Issue 56 asked for observations as named groups, "a dict of tensors or a TensorDict (what rsl_rl 5
and TorchRL use): measure its overhead on the peers table and pick". The files use
`common.storage.Batch`, a `dict` subclass. This script trains the peers table's PPO and PQN rows
(`ppo_vec` and `pqn` on CartPole-v1 with their own defaults) twice each, alternating: as they are,
and with `Batch` replaced in the file by the same interface over `tensordict.TensorDict` (`TD`
below: construction infers the batch size, `zeros`, `minibatches`; indexing, writing rows,
`flatten`, `clone`, `copy_` and `update` are TensorDict's own). Both train the same numbers (the
script checks the final evaluation and parameters are equal); the table is training env-steps per
second, one thread, medians over the repeats.

tensordict is not a project dependency: run it with an interpreter that has it, e.g.
`bench/.venv-td` (`bash benchmark.sh tensordict` makes it: the project's own venv plus tensordict).

    bench/.venv-td/bin/python bench/tensordict_overhead.py [--repeats 4] [--steps 100000]
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import platform
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

ROWS = {"ppo": "ppo_vec", "pqn": "pqn"}


def td_batch():
    """`Batch`'s interface over TensorDict (imported here: only this script needs tensordict)."""
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


def run(algo: str, steps: int, storage: str, seed: int = 1) -> dict:
    module = importlib.import_module(f"algos.{algo}")
    if storage == "tensordict":
        module.Batch = td_batch()
    else:
        from common.storage import Batch

        module.Batch = Batch
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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--only", nargs="*", default=list(ROWS))
    a = p.parse_args()
    torch.set_num_threads(1)
    import tensordict

    rows = []
    for row in a.only:
        algo, got = ROWS[row], {"dict": [], "tensordict": []}
        for _ in range(a.repeats):
            for storage in ("dict", "tensordict"):  # alternating: drift hits both alike
                got[storage].append(run(algo, a.steps, storage))
        same = {(r["eval"], r["params"]) for r in got["dict"] + got["tensordict"]}
        d, t = (statistics.median(r["sps"] for r in got[s]) for s in ("dict", "tensordict"))
        rows.append((row, algo, d, t, len(same) == 1))
        print(f"{row}: dict {d:,.0f} env-steps/s, TensorDict {t:,.0f} ({t / d:.2f}x)", flush=True)
    cpu = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line),
        platform.machine(),
    )
    host = f"{cpu}, torch {torch.__version__}"
    lines = [
        f"{datetime.date.today()}; {host}; tensordict {tensordict.__version__}; "
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
    from report import script  # bench/report.py (this script's folder is on sys.path)

    script(main, "tensordict")
