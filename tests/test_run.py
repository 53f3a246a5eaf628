"""Run helpers: atomic checkpoints and their errors, RNG state, replay buffer, logger files."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from common.buffers import ReplayBuffer
from common.checkpoint import load_checkpoint, save_checkpoint
from common.device import resolve_device, rng_state, seed_everything, set_rng_state
from common.logger import Logger, Meter


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
    example = (torch.zeros(3, 2), torch.zeros(3, dtype=torch.long))  # one step: obs, action
    rb = ReplayBuffer(10, *example)
    for k in range(4):  # 4 adds of 3 = 12 > capacity 10: wraps around
        obs = torch.full((3, 2), float(k))
        rb.add(obs, torch.full((3,), k), torch.full((3,), float(k)), obs + 0.5, torch.zeros(3))
    assert len(rb) == 10 and rb.pos == 2
    assert rb.data["rewards"][:2].tolist() == [3.0, 3.0]  # oldest rows overwritten
    b = rb.sample(1000)
    assert set(b["rewards"].unique().tolist()) == {0.0, 1.0, 2.0, 3.0}
    assert torch.equal(b["next_obs"], b["obs"] + 0.5) and torch.equal(
        b["actions"].float(), b["rewards"]
    )
    fresh = ReplayBuffer(10, *example)
    fresh.load_state_dict(rb.state_dict())
    assert (
        torch.equal(fresh.data["obs"], rb.data["obs"])
        and fresh.pos == rb.pos
        and fresh.size == rb.size
    )
    with pytest.raises(ValueError, match="same --buffer-size"):
        ReplayBuffer(20, *example).load_state_dict(rb.state_dict())


def test_meter_means_each_name_since_the_last_pop():
    meter = Meter("cpu", "loss", "kl", "unused")
    meter.add(loss=torch.tensor(1.0), kl=torch.tensor(0.25, dtype=torch.float64))
    meter.add(loss=torch.tensor(2.0, requires_grad=True) * 1)  # a graph's output: added detached
    out = meter.pop()
    assert out["loss"] == 1.5 and out["kl"] == 0.25 and np.isnan(out["unused"])
    meter.add(kl=torch.tensor(1.0))
    assert meter.pop()["kl"] == 1.0 and np.isnan(meter.pop()["loss"])
    # every name at once, in order (one stacked add), then a subset: the same sums and counts as
    # name by name
    for _ in range(2):
        meter.add(
            loss=torch.tensor(1.0),
            kl=torch.tensor(0.5, requires_grad=True) * 1,
            unused=torch.tensor(3.0),
        )
    meter.add(loss=torch.tensor(4.0))
    assert meter.pop() == {"loss": 2.0, "kl": 0.5, "unused": 3.0}


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


def test_a_run_ends_with_a_line_naming_its_directory_and_last_evaluation(tmp_path, capsys):
    """The progress lines scroll away: the last line says where the run went and its last evaluation
    (`--quiet`: nothing)."""

    class A:
        env, plots = "CartPole-v1", False

    for quiet in (False, True):
        (tmp_path / str(quiet)).mkdir()
        log = Logger(tmp_path / str(quiet), "dqn", A(), total_steps=100, quiet=quiet)
        log.log(50, **{"eval_return": 123.4})
        log.log(100, **{"return": 7.0})
        log.close()
        out = capsys.readouterr().out.splitlines()
        if quiet:
            assert out == []
        else:
            assert out[-1].startswith(
                "[dqn CartPole-v1] done: 100 steps, eval_return 123.4 at step 50;"
            ), out
            assert out[-1].endswith(f"run dir {tmp_path / str(quiet)}"), out


def test_the_eta_follows_the_recent_rate_not_the_warm_up(tmp_path, capsys, monkeypatch):
    """An off-policy run's random warm-up steps thousands a second, its learning tens: the ETA is
    the steps left at the recent rate (here 7,000 at 50 a second), not at the run's mean rate
    (0:49 here, hours too soon on a 500k-step run)."""
    import common.logger as logger

    clock = [0.0]
    monkeypatch.setattr(logger.time, "perf_counter", lambda: clock[0])

    class A:
        env, plots = "BipedalWalker-v3", False

    log = Logger(tmp_path, "sac", A(), total_steps=10_000)
    clock[0] = 1.0
    log.log(2_000)  # the warm-up: 2,000 random steps in a second
    log.burn_in(2_000)
    log.burn_in(2_000)  # two learning iterations: `sps` starts over
    for k in (1, 2):
        clock[0] = 1.0 + 10 * k
        log.log(2_000 + 500 * k)  # learning: 50 steps a second
    log.close()
    last = capsys.readouterr().out.splitlines()[-2]
    assert "50 sps" in last and last.endswith("ETA 2:20"), last


def test_the_run_clock_starts_after_the_loggers_set_up(tmp_path, monkeypatch):
    """`seconds` (the training clock the peers benchmark reads) leaves out the logger's own set-up:
    a slow TensorBoard writer (its import and event file take ~0.1 s) is not training time; a
    resumed run's clock goes on from the checkpoint's seconds."""
    import time

    from torch.utils import tensorboard

    class SlowWriter(tensorboard.SummaryWriter):
        def __init__(self, *a, **k):
            time.sleep(0.5)
            super().__init__(*a, **k)

    monkeypatch.setattr(tensorboard, "SummaryWriter", SlowWriter)

    class A:
        env, tensorboard = "CartPole-v1", True

    log = Logger(tmp_path, "ppo_vec", A(), total_steps=100, quiet=True)
    assert log.tb is not None and log.seconds < 0.25, log.seconds
    log.close()
    (tmp_path / "resumed").mkdir()
    log = Logger(tmp_path / "resumed", "ppo_vec", A(), total_steps=100, quiet=True, elapsed=10.0)
    assert 10.0 <= log.seconds < 10.25, log.seconds
    log.close()


def _tb_scalars(run_dir) -> dict:
    """Every scalar in the TensorBoard event files of `run_dir`: {tag: [(step, value), ...]}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_events_hold_the_metrics_rows_and_drop_what_a_resume_drops(tmp_path):
    class A:
        env, tensorboard = "CartPole-v1", True

    log = Logger(tmp_path, "ppo_vec", A(), total_steps=100, quiet=True)
    for s in (10, 20, 30):
        log.log(s, **{"return": float(s), "pg_loss": 0.5 * s})
    log.close()
    tb = _tb_scalars(tmp_path)
    assert tb["return"] == [(10, 10.0), (20, 20.0), (30, 30.0)] and tb["pg_loss"][-1] == (30, 15.0)
    assert {"seconds", "sps"} <= set(tb)
    log2 = Logger(tmp_path, "ppo_vec", A(), total_steps=100, quiet=True, resume_step=20)
    log2.log(30, **{"return": 99.0})
    log2.close()
    assert _tb_scalars(tmp_path)["return"] == [(10, 10.0), (20, 20.0), (30, 99.0)]

    class Off:
        env, tensorboard = "CartPole-v1", False

    (tmp_path / "off").mkdir()
    Logger(tmp_path / "off", "ppo_vec", Off(), total_steps=100, quiet=True).close()
    assert not list((tmp_path / "off").glob("events.out.tfevents.*"))


def test_an_algorithm_run_writes_tensorboard_events_equal_to_its_jsonl(tmp_path):
    import importlib

    ppo_vec = importlib.import_module("algos.ppo_vec")
    out = ppo_vec.main(
        ppo_vec.Args(
            env="CartPole-v1",
            num_envs=8,
            total_steps=2048,
            eval_every=1024,
            eval_episodes=2,
            quiet=True,
            out_dir=str(tmp_path),
        )
    )
    rows = [json.loads(line) for line in open(f"{out['run_dir']}/metrics.jsonl")]
    tb = _tb_scalars(out["run_dir"])
    for key in ("eval_return", "pg_loss", "sps"):
        want = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), float)]
        assert [s for s, _ in tb[key]] == [s for s, _ in want] and want
        np.testing.assert_allclose(
            [v for _, v in tb[key]], [v for _, v in want], rtol=1e-6, equal_nan=True
        )


def test_checkpoint_format_versions_migrate_or_are_refused_by_name(tmp_path, capfd):
    """rl-checkpoint/1 files are migrated on load (a 0-dim SAC temperature and its Adam moments
    become shape (1,)); a version this library does not know is refused, naming the one found and
    the one needed."""
    from common.checkpoint import CHECKPOINT_FORMAT
    from conftest import assert_user_error

    old = tmp_path / "v1.pt"
    torch.save(
        {
            "format": "rl-checkpoint/1",
            "algo": "sac",
            "env_id": "Pendulum-v1",
            "log_alpha": torch.tensor(-1.0),
            "alpha_opt": {
                "state": {
                    0: {
                        "step": torch.tensor(3.0),
                        "exp_avg": torch.tensor(0.5),
                        "exp_avg_sq": torch.tensor(0.25),
                    }
                },
                "param_groups": [],
            },
        },
        old,
    )
    ck = load_checkpoint(old)
    assert ck["format"] == CHECKPOINT_FORMAT
    assert ck["log_alpha"].shape == (1,) and ck["log_alpha"].item() == -1.0
    st = ck["alpha_opt"]["state"][0]
    assert st["exp_avg"].shape == (1,) and st["exp_avg_sq"].shape == (1,) and st["step"].dim() == 0
    future = tmp_path / "v9.pt"
    torch.save({"format": "rl-checkpoint/9", "algo": "sac"}, future)
    with pytest.raises(
        ValueError,
        match="has checkpoint format 'rl-checkpoint/9'; this version of the library "
        f"reads '{CHECKPOINT_FORMAT}'",
    ) as e:
        load_checkpoint(future)
    assert_user_error(e.value, capfd)


def test_a_v1_sac_checkpoint_with_a_0dim_temperature_resumes(tmp_path):
    """The old SAC checkpoints (0-dim log_alpha, rl-checkpoint/1) load into today's sac.py and train
    on."""
    from algos import sac
    from conftest import SMALL_RUNS

    kw = dict(SMALL_RUNS["sac"], out_dir=str(tmp_path / "runs"))
    r = sac.main(sac.Args(**kw))
    ck = torch.load(r["checkpoint"], weights_only=False)
    ck["format"] = "rl-checkpoint/1"
    ck.pop("spaces")
    ck["log_alpha"] = ck["log_alpha"].reshape(())
    for st in ck["alpha_opt"]["state"].values():
        st.update({k: v.reshape(()) for k, v in st.items() if k != "step"})
    old = tmp_path / "old" / "checkpoint.pt"
    old.parent.mkdir()
    torch.save(ck, old)
    out = sac.main(sac.Args(**dict(kw, resume=str(old), total_steps=kw["total_steps"] * 2)))
    assert out["steps"] == kw["total_steps"] * 2
    assert torch.load(out["checkpoint"], weights_only=False)["log_alpha"].shape == (1,)


@pytest.mark.parametrize("algo", ["td3", "fast_td3", "sac_h"])
def test_a_v2_checkpoint_of_the_ddpg_family_resumes_to_the_same_numbers(tmp_path, algo):
    """rl-checkpoint/2 kept the DDPG/TD3/SAC files' observations as one tensor where they are named
    groups now (the next observation, the replay rows, fast_td3's n-step window, the H-term store):
    such a checkpoint, migrated on load, resumes to the same numbers as today's."""
    import importlib

    from conftest import SMALL_RUNS, assert_same

    module = importlib.import_module(f"algos.{algo}")
    kw = dict(SMALL_RUNS[algo], out_dir=str(tmp_path / "runs"))
    start, n = kw.get("learning_starts", 0), kw["num_envs"]
    half = (start + (kw["total_steps"] - start) // 2) // n * n  # learning, and more to go
    ck = torch.load(module.main(module.Args(**dict(kw, total_steps=half)))["checkpoint"])

    def flat(x):
        return x["policy"]

    (tmp_path / "new").mkdir()
    torch.save(ck, tmp_path / "new" / "checkpoint.pt")
    ck["format"], ck["policy_spec"]["groups"] = "rl-checkpoint/2", False
    ck["next_obs"] = flat(ck["next_obs"])
    ck["buffer"]["obs"], ck["buffer"]["next_obs"] = map(
        flat, (ck["buffer"]["obs"], ck["buffer"]["next_obs"])
    )
    if "h_store" in ck:
        ck["h_store"]["obs"] = flat(ck["h_store"]["obs"])
    if "window" in ck:
        ck["window"]["steps"] = [
            (flat(s[0]), *s[1:3], flat(s[3]), *s[4:]) for s in ck["window"]["steps"]
        ]
    (tmp_path / "old").mkdir()
    torch.save(ck, tmp_path / "old" / "checkpoint.pt")
    ends = [
        torch.load(
            module.main(module.Args(**dict(kw, resume=str(tmp_path / d / "checkpoint.pt"))))[
                "checkpoint"
            ]
        )
        for d in ("new", "old")
    ]
    for key in set(ends[0]) - {"args", "seconds"}:
        assert_same(ends[0][key], ends[1][key], key)


def test_a_full_disk_mid_write_is_one_line_and_keeps_the_previous_file(
    tmp_path, monkeypatch, capfd
):
    import errno
    import os

    from common.checkpoint import atomic_write
    from conftest import assert_user_error

    path = atomic_write(tmp_path / "ck.pt", b"good")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left on device; the previous file is intact") as e:
        atomic_write(path, b"newer")
    monkeypatch.undo()
    assert path.read_bytes() == b"good" and [p.name for p in tmp_path.iterdir()] == ["ck.pt"]
    assert "free disk space" in assert_user_error(e.value, capfd)


def test_the_run_shell_saves_the_state_a_file_names_and_restores_it(tmp_path):
    """common.run.Run: a file names its state once (`run.start(env, state, ...)`); the checkpoint
    holds exactly that state under those names, the file's meta and extras, the counters and the
    generators; a resumed run restores it and continues at the saved step (bit-exactness of whole
    runs: tests/test_faults.py)."""
    import torch

    from algos import ppo_vec

    kw = dict(
        env="CartPole-v1",
        num_envs=4,
        num_steps=8,
        total_steps=64,
        eval_every=0,
        save_every=0,
        quiet=True,
        tensorboard=False,
        plots=False,
    )
    first = ppo_vec.main(ppo_vec.Args(out_dir=str(tmp_path / "a"), **kw))
    ck = torch.load(first["checkpoint"], weights_only=False)
    state = {"model", "optimizer", "env", "next_obs"}
    shell = {
        "algo",
        "env_id",
        "args",
        "spaces",
        "rng",
        "iteration",
        "global_step",
        "updates",
        "seconds",
        "ticks",
    }
    meta = {"policy", "policy_spec"}  # the deployable policy: common/policy.py
    assert set(ck) - {"format"} == state | shell | meta, sorted(set(ck) ^ (state | shell | meta))
    assert ck["iteration"] == 2 and ck["global_step"] == 64
    again = ppo_vec.main(
        ppo_vec.Args(
            out_dir=str(tmp_path / "b"), resume=first["checkpoint"], **{**kw, "total_steps": 96}
        )
    )
    assert again["steps"] == 96
    ck2 = torch.load(again["checkpoint"], weights_only=False)
    assert ck2["iteration"] == 3 and not torch.equal(
        ck2["next_obs"]["policy"], ck["next_obs"]["policy"]
    )


def test_hooks_attach_to_the_run_a_file_makes(tmp_path):
    """Code around a file's `main` (bench/, a population) sees the run open, every logged row,
    every checkpoint written and the end of every iteration, may evaluate in the file's place and
    makes what the file captures: through `common.run.hooks`, without replacing a module's
    names."""
    from algos import ppo_vec
    from common.graphs import Captured
    from common.run import hooks
    from conftest import SMALL_RUNS

    seen = {"open": [], "rows": [], "saved": [], "evaluated": 0, "steps": [], "captured": []}

    def capture(fn, device, **kwargs):
        seen["captured"].append(fn.__name__)
        return Captured(fn, device, **kwargs)

    def evaluate(policy, env_id, episodes, seed=0, device="cpu"):
        seen["evaluated"] += 1
        return {"eval_return": 7.0, "eval_return_std": 0.0}

    kw = dict(SMALL_RUNS["ppo_vec"], out_dir=str(tmp_path))
    with hooks(
        on_open=lambda run: seen["open"].append(run.run_dir),
        on_log=lambda run, row: seen["rows"].append(row),
        on_save=lambda run, path: seen["saved"].append((run.step, path)),
        on_iteration=lambda run: seen["steps"].append(run.step),
        evaluate=evaluate,
        capture=capture,
    ):
        out = ppo_vec.main(ppo_vec.Args(**kw))
    assert [str(d) for d in seen["open"]] == [out["run_dir"]]
    evals = [r for r in seen["rows"] if "eval_return" in r]
    assert len(evals) == seen["evaluated"] >= 1 and all(r["eval_return"] == 7.0 for r in evals)
    assert out["eval_return"] == 7.0 and seen["rows"][-1]["step"] == out["steps"]
    assert seen["saved"][-1] == (out["steps"], Path(out["checkpoint"]))
    steps = seen["steps"]
    assert len(steps) > 1 and steps[-1] == out["steps"] and steps == sorted(set(steps))
    assert seen["captured"] == ["train_iteration"]
    # outside the block, a run has none
    again = ppo_vec.main(ppo_vec.Args(**dict(kw, out_dir=str(tmp_path / "again"))))
    assert again["eval_return"] != 7.0 and len(seen["open"]) == 1
