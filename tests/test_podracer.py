"""The Podracer files are their parents plus parallelism, nothing else: run in one process with the
parallelism off, `algos/<x>_podracer.py` trains the very same run as `algos/<x>.py` (every network,
optimizer and buffer tensor of the final checkpoint equal, bit for bit). `tests/test_lineage.py`
holds the size of the difference; this holds its meaning."""

import importlib

import pytest
import torch

from conftest import assert_same

_AC = dict(
    env="Pendulum-v1",
    num_envs=2,
    total_steps=2 * 120,
    learning_starts=60,
    batch_size=32,
    hidden=(32, 32),
    eval_every=0,
    save_every=0,
    eval_episodes=2,
    quiet=True,
)
CASES = {
    "td3": {**_AC, "per": True},
    "sac": {**_AC, "norm_obs": True},
    "ppo_vec": dict(
        env="Pendulum-v1",
        num_envs=8,
        num_steps=8,
        num_minibatches=2,
        total_steps=8 * 8 * 4,
        eval_every=0,
        save_every=0,
        eval_episodes=2,
        quiet=True,
        norm_obs=True,
        norm_reward=True,
    ),
}
# what only the parallel file stores or names differently
_SKIP = {"algo", "args", "seconds", "learned", "explore_rng", "world_size", "format"}


@pytest.mark.parametrize("parent", list(CASES))
def test_podracer_file_without_parallelism_is_its_parent(parent, tmp_path):
    runs = {}
    for name in (parent, parent.replace("_vec", "") + "_podracer"):
        module = importlib.import_module(f"algos.{name}")
        result = module.main(module.Args(out_dir=str(tmp_path / name), seed=3, **CASES[parent]))
        runs[name] = torch.load(result["checkpoint"], weights_only=False)
    a, b = runs.values()
    # (ppo_vec counts no updates: only ppo_podracer's --fuse-every schedule needs the count)
    skip = _SKIP | ({"updates"} if a.get("updates") == 0 else set())
    shared = sorted((set(a) & set(b)) - skip)
    assert {"rng", "env", "next_obs"} <= set(shared) and len(shared) >= 8, shared
    assert_same({k: a[k] for k in shared}, {k: b[k] for k in shared}, where=parent)
