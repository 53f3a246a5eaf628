"""Run helpers: atomic checkpoints and their errors, RNG state, replay buffer, logger files."""

import json

import numpy as np
import pytest
import torch

from common.buffers import ReplayBuffer
from common.checkpoint import load_checkpoint, save_checkpoint
from common.device import resolve_device, rng_state, seed_everything, set_rng_state
from common.logger import Logger


def test_checkpoint_round_trip_and_atomic_replace(tmp_path):
    path = tmp_path / "ck.pt"
    net = torch.nn.Linear(3, 2)
    save_checkpoint(path, {"algo": "x", "env_id": "E", "model": net.state_dict(), "step": 7})
    ck = load_checkpoint(path, algo="x", env_id="E")
    assert ck["step"] == 7 and torch.equal(ck["model"]["weight"], net.weight)
    # a failing write (unpicklable payload) leaves the previous checkpoint intact and no temp file
    with pytest.raises(Exception):
        save_checkpoint(path, {"algo": "x", "bad": lambda: 0})
    assert load_checkpoint(path)["step"] == 7
    assert [p.name for p in tmp_path.iterdir()] == ["ck.pt"]


def test_checkpoint_errors_name_what_was_found(tmp_path):
    path = tmp_path / "ck.pt"
    save_checkpoint(path, {"algo": "dqn", "env_id": "CartPole-v1"})
    with pytest.raises(ValueError, match="written by algos/dqn.py, not algos/ppo_vec.py"):
        load_checkpoint(path, algo="ppo_vec")
    with pytest.raises(ValueError, match="trained on 'CartPole-v1', not 'Pendulum-v1'"):
        load_checkpoint(path, env_id="Pendulum-v1")
    truncated = tmp_path / "trunc.pt"
    truncated.write_bytes(path.read_bytes()[:50])
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        load_checkpoint(truncated)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(ValueError, match="not a checkpoint of this library"):
        load_checkpoint(foreign)
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.pt")


def test_rng_state_round_trip(tmp_path):
    seed_everything(3)
    state = rng_state()
    save_checkpoint(tmp_path / "r.pt", {"rng": state})
    a = (torch.rand(3), np.random.rand(3), __import__("random").random())
    set_rng_state(load_checkpoint(tmp_path / "r.pt")["rng"])
    b = (torch.rand(3), np.random.rand(3), __import__("random").random())
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]


def test_resolve_device():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="not a device"):
        resolve_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees no GPU"):
            resolve_device("cuda")


def test_replay_buffer_wraps_and_samples_valid_rows():
    rb = ReplayBuffer(10, (2,), (), torch.long)
    for k in range(4):  # 4 adds of 3 = 12 > capacity 10: wraps around
        obs = torch.full((3, 2), float(k))
        rb.add(obs, torch.full((3,), k), torch.full((3,), float(k)), obs + 0.5, torch.zeros(3))
    assert len(rb) == 10 and rb.pos == 2
    assert rb.rewards[:2].tolist() == [3.0, 3.0]  # oldest rows overwritten
    b = rb.sample(1000)
    assert set(b.rewards.unique().tolist()) == {0.0, 1.0, 2.0, 3.0}
    assert torch.equal(b.next_obs, b.obs + 0.5) and torch.equal(b.actions.float(), b.rewards)
    fresh = ReplayBuffer(10, (2,), (), torch.long)
    fresh.load_state_dict(rb.state_dict())
    assert torch.equal(fresh.obs, rb.obs) and fresh.pos == rb.pos and fresh.size == rb.size
    with pytest.raises(ValueError, match="same --buffer-size"):
        ReplayBuffer(20, (2,), (), torch.long).load_state_dict(rb.state_dict())


def test_logger_writes_metrics_curves_and_resume_truncation(tmp_path):
    class A:
        env = "CartPole-v1"

    log = Logger(tmp_path, "ppo_vec", A(), total_steps=100, quiet=True)
    for s in (10, 20, 30):
        log.log(s, **{"return": float(s), "eval_return": float(2 * s)})
    log.close()
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [10, 20, 30] and rows[1]["eval_return"] == 40.0
    assert (tmp_path / "metrics.csv").read_text().splitlines()[0].startswith("step,seconds,sps")
    assert (tmp_path / "curves.png").stat().st_size > 1000
    # resuming from a checkpoint at step 20 drops the rows logged after it
    log2 = Logger(tmp_path, "ppo_vec", A(), total_steps=100, quiet=True, resume_step=20)
    assert [r["step"] for r in log2.rows] == [10, 20]
    assert len(open(tmp_path / "metrics.jsonl").readlines()) == 2
