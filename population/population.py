"""Population training on `torch.distributed`: tournament-based ensemble training and generational
evolution (ElegantRL-Podracer's two population schemes), one member per `torchrun` worker.

    python -m population --algo algos/ppo_vec.py --population 4 --rounds 8 \\
        --steps-per-round 50000 --vary learning_rate=3e-4,1e-3,3e-3 \\
        -- --env CartPole-v1 --num-envs 128 --no-anneal-lr

Everything after `--` is the algorithm's own flags, shared by every member; `--vary KEY=V1,V2,...`
gives member i the value `V[i % len]` (member i also gets seed `seed + i`). With several `--algo`
files (of the same action space) members take them in turn.

Run as above, the command launches `torchrun --standalone --nproc-per-node POPULATION --max-restarts
MAX_RESTARTS -m population` on itself; under an existing `torchrun` (many nodes, elastic `--nnodes
MIN:MAX`, started in the repository's root) each worker is one member, member id = its global rank:

    torchrun --nnodes 1:4 --nproc-per-node 8 --max-restarts 3 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29400 -m population --dir /shared/pop ... -- --env Pendulum-v1

A member trains in rounds of `--steps-per-round` environment steps: a round resumes the member's
checkpoint with `--total-steps` raised by one round (the algorithm's own `main(Args(resume=...))`,
in-process), then scores it by a deterministic evaluation that is the same for every member and
round (`--eval-episodes` episodes from `--eval-seed`) and publishes the checkpoint as a leaderboard
entry. Nobody exploits after the last round.

* `tournament` (asynchronous): after each round a member draws a leaderboard entry with
  probability softmax(normalized return / temperature); if the entry scores better than the member,
  the member restarts from a copy of it with perturbed hyper-parameters (exploit + explore),
  otherwise it continues. Nobody waits for anybody.
* `generational` (synchronous): after each round (a generation) every member waits until all have
  published; members are ranked by score and the worst `--replace-fraction` take copies of the best
  ones' checkpoints with perturbed hyper-parameters. Every member computes the same decision from
  the same scores; rank 0 logs it.

Coordination uses torch.distributed's key-value store (the TCPStore that torchrun's c10d rendezvous
agent hosts, so it outlives worker restarts) and a shared directory (`--dir`, a network file system
on a cluster) where every file is written atomically (temp file + rename):

    DIR/population.json          settings of the population
    DIR/population.jsonl         event log: rounds, adoptions, generations, (re)starts
    DIR/leaderboard.json         every kept entry, best first (rebuilt from the entry files)
    DIR/leaderboard/<id>.pt      a published checkpoint (<id> = m<member>-r<round>), and <id>.json
                                 its entry
    DIR/members/m<i>/state.json  the member's commit point: round, segment, round start step
    DIR/members/m<i>/seg<k>/...  the algorithm's run directory (checkpoint, metrics, curves)

Fault tolerance: a member's `state.json` is rewritten only after the round's checkpoint and entry
exist, so a killed member (or node) restarted by torchrun (`--max-restarts`) resumes from its last
checkpoint, mid-round included (the algorithm's `--save-every`). torchrun restarts a node's whole
worker group when one worker dies; the other members resume the same way and lose at most the steps
since their last checkpoint. The leaderboard files survive anything; a new job on the same `--dir`
reloads them into the store and continues.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np
import torch

from common import distributed
from common.checkpoint import RESUME_MAY_CHANGE, atomic_write, load_checkpoint, save_checkpoint
from common.cli import cli
from common.device import available_cores, rng_state, seed_everything, set_rng_state
from common.errors import UserError, UserFileNotFoundError
from common.evaluate import evaluate

STORE_PREFIX = "podracer-population/"


@dataclass
class PopArgs:
    algo: tuple[str, ...] = ("algos/ppo_vec.py",)
    """algorithm file(s); with several (same action space), members take them in turn"""
    mode: Literal["tournament", "generational"] = "tournament"
    """`tournament`: asynchronous, re-seed from the leaderboard by softmax over scores;
    `generational`: synchronous, the worst members take copies of the best every round"""
    population: int = 4
    """members when this command launches torchrun itself (under torchrun: the world size)"""
    rounds: int = 10
    """rounds (generations) each member trains"""
    steps_per_round: int = 100_000
    """environment steps of one round"""
    dir: str | None = None
    """shared directory of the population (default: runs/pop__<algo>__<env>__<time>); running again
    with the same --dir continues the population"""
    vary: tuple[str, ...] = ()
    """per-member values `KEY=V1,V2,...` of algorithm flags (member i gets V[i % len]);
    repeatable"""
    mutate: tuple[str, ...] | None = None
    """hyper-parameters perturbed on exploit (default: the algorithm's learning rates)"""
    perturb: float = 1.25
    """a mutated hyper-parameter is multiplied or divided by this factor (chosen at random)"""
    temperature: float = 1.0
    """tournament: softmax temperature over the leaderboard's normalized returns"""
    replace_fraction: float = 0.25
    """generational: fraction of members (at least one) replaced by copies of the best each
    generation"""
    keep: int = 16
    """leaderboard entries kept (best scores), besides each member's two newest"""
    seed: int = 0
    """seed of the population's own choices (the members' algorithm seeds are their --seed +
    member)"""
    max_restarts: int = 3
    """torchrun --max-restarts when this command launches torchrun itself"""
    threads: int = 0
    """torch threads per member (0: cores / members on the node)"""
    wait_timeout: float = 3600.0
    """generational: seconds to wait for the other members of a generation"""
    eval_episodes: int = 50
    """episodes of the deterministic evaluation that scores every round (run in parallel)"""
    eval_seed: int = 10_000
    """seed of that evaluation: the same episodes for every member and round, so scores compare"""
    heartbeat_timeout: float = 120.0
    """a member whose heartbeat (every 5 s, in the store) stops this long has left: generational
    rounds then re-form the group through torchrun, and nobody waits for it at the end"""
    verbose: bool = False
    """show the members' own progress lines"""


# ---------------------------------------------------------------------------------------------
# algorithm files and their arguments
# ---------------------------------------------------------------------------------------------
_MODULES: dict[str, object] = {}


def load_algo(path: str):
    """Import an algorithm file (anything with `Args`, `main` and `load_policy`) by path."""
    path = str(Path(path).resolve())
    if path not in _MODULES:
        if not Path(path).is_file():
            raise UserFileNotFoundError(
                f"--algo {path}: no such file (e.g. --algo algos/ppo_vec.py)"
            )
        spec = importlib.util.spec_from_file_location(f"population_algo_{Path(path).stem}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look their module up while the file executes
        spec.loader.exec_module(mod)
        for name in ("Args", "main", "load_policy", "ALGO"):
            if not hasattr(mod, name):
                raise UserError(f"--algo {path} is not an algorithm file: it has no `{name}`")
        _MODULES[path] = mod
    return _MODULES[path]


def _defaults(mod, env_id: str):
    return (
        mod.default_args(env_id)
        if hasattr(mod, "default_args")
        else dataclasses.replace(mod.Args(), env=env_id)
    )


def _convert(value: str, like):
    if isinstance(like, bool):
        if value.lower() not in ("true", "false", "1", "0"):
            raise UserError(f"expected true/false, got {value!r}")
        return value.lower() in ("true", "1")
    if isinstance(like, int):
        return int(float(value))
    if isinstance(like, float):
        return float(value)
    return value


def parse_vary(vary: tuple[str, ...]) -> dict[str, list[str]]:
    out = {}
    for item in vary:
        key, sep, values = item.partition("=")
        if not sep or not values:
            raise UserError(
                f"--vary {item!r}: write KEY=V1,V2,... (e.g. --vary learning_rate=3e-4,1e-3)"
            )
        out[key.strip().replace("-", "_")] = [v.strip() for v in values.split(",")]
    return out


def member_args(pop: PopArgs, algo_argv: list[str], member: int):
    """The algorithm module and `Args` of member `member` (before any exploit)."""
    path = pop.algo[member % len(pop.algo)]
    mod = load_algo(path)
    defaults_for = getattr(mod, "default_args", None)
    args = cli(mod.Args, defaults_for=defaults_for, argv=algo_argv)
    changes = {"seed": args.seed + member}
    if args.threads == "auto":  # the member's share of this node's cores (`--threads`)
        changes["threads"] = member_threads(pop)
    for key, values in parse_vary(pop.vary).items():
        if not hasattr(args, key):
            fields = ", ".join(f.name for f in dataclasses.fields(args))
            raise UserError(f"--vary {key}: {path} has no such flag; its flags are: {fields}")
        changes[key] = _convert(values[member % len(values)], getattr(args, key))
    return path, mod, dataclasses.replace(args, **changes)


def member_threads(pop: PopArgs) -> int:
    """Each member's torch threads: `--threads`, else its share of the node's cores (members x
    threads <= cores, so that members side by side do not slow each other down)."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", 1)))
    return pop.threads or max(1, available_cores() // local_world)


def mutable_keys(pop: PopArgs, args) -> list[str]:
    if pop.mutate is not None:
        keys = [k.replace("-", "_") for k in pop.mutate]
        bad = [
            k
            for k in keys
            if not isinstance(getattr(args, k, None), (int, float))
            or isinstance(getattr(args, k), bool)
        ]
        if bad:
            raise UserError(
                f"--mutate {' '.join(bad)}: not numeric flags of {type(args).__module__}'s Args"
            )
        return keys
    return [
        f.name
        for f in dataclasses.fields(args)
        if (f.name == "learning_rate" or f.name.endswith("_lr"))
        and type(getattr(args, f.name)) is float
    ]


def mutate_checkpoint(
    ckpt: dict, keys: list[str], factor_rng: np.random.Generator, perturb: float
) -> dict:
    """Perturb hyper-parameters `keys` in a checkpoint's saved args (x perturb or / perturb);
    learning rates are also changed in the saved optimizer states (`X_lr` -> `X_opt`,
    `learning_rate` -> `optimizer`, else every optimizer whose rate equals the old value), so the
    resumed run uses them."""
    new = {}
    optimizers = {
        k: v
        for k, v in ckpt.items()
        if isinstance(v, dict) and "param_groups" in v and "state" in v
    }
    for key in keys:
        old = ckpt["args"][key]
        factor = perturb if factor_rng.random() < 0.5 else 1.0 / perturb
        value = (
            type(old)(max(1, round(old * factor)))
            if isinstance(old, int)
            else float(f"{old * factor:.6g}")
        )
        ckpt["args"][key] = new[key] = value
        if key == "learning_rate" or key.endswith("_lr"):
            own = "optimizer" if key == "learning_rate" else key[:-3] + "_opt"
            targets = [optimizers[own]] if own in optimizers else list(optimizers.values())
            for opt in targets:
                for group in opt["param_groups"]:
                    lr = group.get("lr", float("nan"))
                    if own in optimizers or math.isclose(float(lr), old, rel_tol=1e-9):
                        # a tensor rate (the PPO and DQN files anneal it in place) stays one
                        if torch.is_tensor(lr):
                            lr.fill_(value)
                        else:
                            group["lr"] = value
    return new


def reseed_checkpoint(ckpt: dict, seed: int) -> None:
    """A copied checkpoint would replay its source's random numbers: give it fresh host RNG
    states."""
    saved = rng_state()
    seed_everything(seed)
    ckpt["rng"] = rng_state()
    set_rng_state(saved)


# ---------------------------------------------------------------------------------------------
# the shared directory and the key-value store
# ---------------------------------------------------------------------------------------------
def write_json(path: Path, obj) -> None:
    atomic_write(path, json.dumps(obj, indent=1))


def read_json(path: Path, default=None):
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return default


def log_event(root: Path, **event) -> None:
    """One JSON line per event, appended with a single O_APPEND write (whole lines from many
    processes)."""
    event = {"time": round(time.time(), 3), **event}
    fd = os.open(root / "population.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(event) + "\n").encode())
    finally:
        os.close(fd)


def read_events(root: Path) -> list[dict]:
    path = Path(root) / "population.jsonl"
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if path.exists()
        else []
    )


def connect_store(timeout: float, client: bool = False):
    """The population's key-value store: torch.distributed's TCPStore at the worker group's
    MASTER_ADDR:MASTER_PORT. Under torchrun's c10d rendezvous that is the agent's own store, which
    outlives worker restarts; when torchrun does not share it (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1,
    static rendezvous) rank 0 hosts it, and what a restart loses is reloaded from the directory.
    `client=True` only connects (a second connection, e.g. for the heartbeat thread).
    Returns (store, hosted_by_rank_0)."""
    import torch.distributed as dist

    if "MASTER_ADDR" not in os.environ:
        raise RuntimeError(
            "a population worker needs torchrun's environment (MASTER_ADDR, RANK, ...): run "
            "`python -m population ...` (it launches torchrun) or launch it with torchrun"
        )
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    host = not agent and int(os.environ["RANK"]) == 0 and not client
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=host,
        timeout=timedelta(seconds=timeout),
        wait_for_workers=False,
    )
    return dist.PrefixStore(STORE_PREFIX, store), not agent


class Heartbeat:
    """A daemon thread that increments `beat/m<id>` in the store every `period` seconds, on its own
    connection. Counters, not timestamps: nodes' clocks need not agree."""

    def __init__(self, member: int, timeout: float, period: float = 5.0):
        import threading

        self.store, _ = connect_store(timeout, client=True)
        self.key, self.period = f"beat/m{member}", period
        self.stop = threading.Event()
        self.store.add(self.key, 1)
        threading.Thread(target=self._run, daemon=True, name="population-heartbeat").start()

    def _run(self):
        while not self.stop.wait(self.period):
            try:
                self.store.add(self.key, 1)
            except Exception:  # the store is gone (its host died): torchrun is restarting us anyway
                return


def wait_for_members(
    store, keys: dict[int, str], stale_after: float, poll: float = 0.5
) -> list[int]:
    """Wait until every member's key exists, or until a member still missing one has not beaten its
    heartbeat for `stale_after` seconds; return those members (empty when all keys arrived)."""
    last: dict[int, tuple[int, float]] = {}
    while True:
        missing = [m for m, k in keys.items() if not store.check([k])]
        if not missing:
            return []
        now = time.monotonic()
        for m in missing:
            beat = store.add(f"beat/m{m}", 0)
            if m not in last or last[m][0] != beat:
                last[m] = (beat, now)
        gone = [m for m in missing if now - last[m][1] > stale_after]
        if gone:
            return gone
        time.sleep(poll)


class Leaderboard:
    """Published rounds: entries in the key-value store (`entries` list + `entry/<id>`), mirrored as
    atomically written files (`leaderboard/<id>.pt` first, then `<id>.json`, so an entry file always
    has its checkpoint) and an index `leaderboard.json`, best first."""

    def __init__(self, root: Path, store, keep: int):
        self.root, self.store, self.keep = Path(root), store, keep
        self.dir = self.root / "leaderboard"
        self.dir.mkdir(parents=True, exist_ok=True)
        if not store.check(["entries"]):  # a new job on an existing directory: reload the files
            for f in sorted(self.dir.glob("*.json")):
                entry = read_json(f)
                if entry is not None:
                    self._put(entry)

    def _put(self, entry: dict) -> None:
        self.store.set(f"entry/{entry['id']}", json.dumps(entry))
        self.store.append("entries", entry["id"] + ",")

    def entries(self) -> list[dict]:
        """Every entry not pruned, best first."""
        if not self.store.check(["entries"]):
            return []
        ids = dict.fromkeys(i for i in self.store.get("entries").decode().split(",") if i)
        entries = [json.loads(self.store.get(f"entry/{i}")) for i in ids]
        return sorted(
            (e for e in entries if not e.get("pruned")), key=lambda e: (-e["score"], e["id"])
        )

    def publish(self, entry: dict, checkpoint: str) -> dict:
        """Copy `checkpoint` into the leaderboard (atomically), record `entry`, prune, rewrite the
        index."""
        pt = self.dir / f"{entry['id']}.pt"
        ckpt = load_checkpoint(checkpoint)
        save_checkpoint(pt, {k: v for k, v in ckpt.items() if k != "format"})
        entry = {**entry, "checkpoint": str(pt)}
        write_json(self.dir / f"{entry['id']}.json", entry)
        self._put(entry)
        self.prune()
        self.write_index()
        return entry

    def prune(self) -> None:
        """Keep the `keep` best entries and each member's two newest; drop the rest (json, then
        pt)."""
        entries = self.entries()
        newest = {}
        for e in sorted(entries, key=lambda e: -e["round"]):
            newest.setdefault(e["member"], []).append(e["id"])
        protected = {i for ids in newest.values() for i in ids[:2]} | {
            e["id"] for e in entries[: self.keep]
        }
        for e in entries:
            if e["id"] not in protected:
                self.store.set(f"entry/{e['id']}", json.dumps({**e, "pruned": True}))
                for suffix in (".json", ".pt"):
                    (self.dir / f"{e['id']}{suffix}").unlink(missing_ok=True)

    def write_index(self) -> None:
        """Rebuild leaderboard.json from the entry files until a re-read finds no newer entry (so
        concurrent writers converge on the complete list)."""
        while True:
            names = sorted(p.name for p in self.dir.glob("*.json"))
            entries = [e for e in (read_json(self.dir / n) for n in names) if e is not None]
            entries.sort(key=lambda e: (-e["score"], e["id"]))
            write_json(self.root / "leaderboard.json", entries)
            if sorted(p.name for p in self.dir.glob("*.json")) == names:
                return


# ---------------------------------------------------------------------------------------------
# a member
# ---------------------------------------------------------------------------------------------
def _node() -> str:
    """Where this worker runs: host name and torchrun's node rank (GROUP_RANK)."""
    import socket

    return f"{socket.gethostname()}/{os.environ.get('GROUP_RANK', 0)}"


def _segment_checkpoint(seg_dir: Path) -> Path | None:
    found = sorted(seg_dir.glob("*/checkpoint.pt"))
    return found[0] if found else None


def softmax_choice(scores: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """Index drawn with probability softmax(normalized score / temperature)."""
    z = (scores - scores.mean()) / (scores.std() + 1e-8)
    p = np.exp((z - z.max()) / max(temperature, 1e-8))
    return int(rng.choice(len(scores), p=p / p.sum()))


def generation_decision(scores: dict[int, float], fraction: float) -> list[tuple[int, int]]:
    """(worst, best) pairs: the worst `fraction` of the members (at least one, at most half) take
    copies of the best ones, the worst of all copying the best of all."""
    ranking = sorted(scores, key=lambda m: (-scores[m], m))
    k = min(max(1, int(round(fraction * len(ranking)))), len(ranking) // 2)
    return [(ranking[-1 - i], ranking[i]) for i in range(k)]


class Member:
    def __init__(
        self, pop: PopArgs, algo_argv: list[str], root: Path, member: int, store, board: Leaderboard
    ):
        self.pop, self.argv, self.root, self.id, self.store, self.board = (
            pop,
            algo_argv,
            root,
            member,
            store,
            board,
        )
        self.dir = root / "members" / f"m{member}"
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.dir / "pid", str(os.getpid()))
        self.algo_path, self.mod, self.base = member_args(pop, algo_argv, member)
        self.state = read_json(self.dir / "state.json") or {
            "member": member,
            "round": 0,
            "segment": 0,
            "start_step": 0,
            "algo": self.algo_path,
            "score": None,
            "hparams": {k: getattr(self.base, k) for k in parse_vary(pop.vary)},
            "lineage": [],
        }
        if self.state["algo"] != self.algo_path:  # adopted another algorithm's checkpoint
            self.mod = load_algo(self.state["algo"])

    # -- one round ---------------------------------------------------------------------------
    def _round_args(self, checkpoint: Path | None, total_steps: int):
        out_dir = str(self.dir / f"seg{self.state['segment']}")
        quiet = not self.pop.verbose
        if checkpoint is None:
            return dataclasses.replace(
                self.base, total_steps=total_steps, out_dir=out_dir, eval_every=0, quiet=quiet
            )
        keep = {k: getattr(self.base, k) for k in RESUME_MAY_CHANGE if hasattr(self.base, k)}
        keep.update(
            resume=str(checkpoint),
            total_steps=total_steps,
            out_dir=out_dir,
            eval_every=0,
            quiet=quiet,
        )
        return dataclasses.replace(_defaults(self.mod, self.base.env), **keep)

    def train_round(self) -> dict:
        """Train the current round to its end (resuming a checkpoint mid-round if there is one)."""
        seg_dir = self.dir / f"seg{self.state['segment']}"
        checkpoint = _segment_checkpoint(seg_dir)
        target = self.state["start_step"] + self.pop.steps_per_round
        step0 = load_checkpoint(checkpoint)["global_step"] if checkpoint else 0
        log_event(
            self.root,
            event="start",
            member=self.id,
            round=self.state["round"],
            step=step0,
            target=target,
            checkpoint=str(checkpoint) if checkpoint else None,
            attempt=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
            node=_node(),
            pid=os.getpid(),
        )
        t0 = time.perf_counter()
        if step0 < target:  # (a round that had finished before a restart is only scored)
            with distributed.solo():  # this worker is one member, not a rank of a fused learner
                checkpoint = Path(self.mod.main(self._round_args(checkpoint, target))["checkpoint"])
        ckpt = load_checkpoint(checkpoint)
        # every member and round on the same episodes (the algorithm's own evaluation uses its seed)
        score = evaluate(
            self.mod.load_policy(str(checkpoint)),
            ckpt["env_id"],
            self.pop.eval_episodes,
            seed=self.pop.eval_seed,
        )["eval_return"]
        return {
            "checkpoint": checkpoint,
            "score": float(score),
            "global_step": int(ckpt["global_step"]),
            "trained": int(ckpt["global_step"]) - step0,
            "seconds": time.perf_counter() - t0,
            "hparams": {k: ckpt["args"][k] for k in self._tracked(ckpt)},
        }

    def _tracked(self, ckpt) -> list[str]:
        keys = list(parse_vary(self.pop.vary)) + mutable_keys(self.pop, self.mod.Args())
        return [k for k in dict.fromkeys(keys) if k in ckpt["args"]]

    def publish(self, r: dict) -> dict:
        entry = {
            "id": f"m{self.id}-r{self.state['round']}",
            "member": self.id,
            "round": self.state["round"],
            "score": r["score"],
            "global_step": r["global_step"],
            "algo": self.state["algo"],
            "hparams": r["hparams"],
            "lineage": self.state["lineage"],
        }
        log_event(
            self.root,
            event="round",
            **{k: v for k, v in entry.items() if k != "lineage"},
            trained=r["trained"],
            seconds=round(r["seconds"], 2),
        )
        return self.board.publish(entry, str(r["checkpoint"]))

    def adopt(self, entry: dict, rng: np.random.Generator) -> dict:
        """Start a new segment from a copy of `entry`'s checkpoint with perturbed
        hyper-parameters."""
        ckpt = load_checkpoint(entry["checkpoint"])
        mod = load_algo(entry["algo"])
        hp = mutate_checkpoint(ckpt, mutable_keys(self.pop, mod.Args()), rng, self.pop.perturb)
        reseed_checkpoint(ckpt, int(rng.integers(2**31)))
        # this member's identity; RNG states were reseeded above
        ckpt["args"]["seed"] = self.base.seed
        segment = self.state["segment"] + 1
        dst = self.dir / f"seg{segment}" / f"from-{entry['id']}" / "checkpoint.pt"
        save_checkpoint(dst, {k: v for k, v in ckpt.items() if k != "format"})
        self.mod = mod
        return {
            "segment": segment,
            "algo": entry["algo"],
            "start_step": int(ckpt["global_step"]),
            "lineage": [*entry["lineage"], entry["id"]],
            "mutated": hp,
            "hparams": {k: ckpt["args"][k] for k in self._tracked(ckpt)},
        }

    def commit(self, **changes) -> None:
        self.state.update(changes)
        write_json(self.dir / "state.json", self.state)

    # -- the loops ---------------------------------------------------------------------------
    def run_tournament(self) -> None:
        while self.state["round"] < self.pop.rounds:
            r = self.train_round()
            mine = self.publish(r)
            rng = np.random.default_rng([self.pop.seed, self.id, self.state["round"]])
            entries = self.board.entries()
            pick = entries[
                softmax_choice(np.array([e["score"] for e in entries]), self.pop.temperature, rng)
            ]
            nxt = {"round": self.state["round"] + 1, "score": r["score"], "hparams": r["hparams"]}
            last = nxt["round"] == self.pop.rounds  # nothing would train a copy taken now
            if not last and pick["score"] > r["score"] and pick["id"] != mine["id"]:
                try:
                    nxt.update(self.adopt(pick, rng))
                except (FileNotFoundError, ValueError):  # pruned meanwhile: continue instead
                    pick = None
                else:
                    log_event(
                        self.root,
                        event="adopt",
                        member=self.id,
                        round=self.state["round"],
                        source=pick["id"],
                        source_score=pick["score"],
                        score=r["score"],
                        algo=pick["algo"],
                        mutated=nxt["mutated"],
                    )
            else:
                pick = None
            if pick is None:
                nxt["start_step"] = r["global_step"]
                log_event(
                    self.root,
                    event="continue",
                    member=self.id,
                    round=self.state["round"],
                    score=r["score"],
                )
            nxt.pop("mutated", None)
            self.commit(**nxt)

    def run_generational(self, world: int) -> None:
        while self.state["round"] < self.pop.rounds:
            g = self.state["round"]
            key = f"gen/{g}/m{self.id}"
            # not yet scored this generation, restarted, or a new store
            if not self.store.check([key]):
                entry = read_json(self.board.dir / f"m{self.id}-r{g}.json")
                if entry is None:
                    entry = self.publish(self.train_round())
                self.store.set(key, json.dumps(entry))
            gone = wait_for_members(
                self.store,
                {m: f"gen/{g}/m{m}" for m in range(world)},
                min(self.pop.heartbeat_timeout, self.pop.wait_timeout),
            )
            if gone:  # exit with an error: torchrun re-forms the group from the members still there
                log_event(self.root, event="left", member=self.id, round=g, gone=gone)
                raise RuntimeError(
                    f"members {gone} stopped answering during generation {g}; torchrun will "
                    f"restart the group (re-rendezvous) and the population continues without them"
                )
            entries = {m: json.loads(self.store.get(f"gen/{g}/m{m}")) for m in range(world)}
            pairs = generation_decision(
                {m: e["score"] for m, e in entries.items()}, self.pop.replace_fraction
            )
            if g + 1 == self.pop.rounds:  # after the last generation nothing would train a copy
                pairs = []
            if self.id == 0 and not (self.root / "generations" / f"g{g}.json").exists():
                decision = {
                    "generation": g,
                    "scores": {f"m{m}": e["score"] for m, e in entries.items()},
                    "replaced": [
                        {
                            "member": w,
                            "by": b,
                            "worst_score": entries[w]["score"],
                            "best_score": entries[b]["score"],
                        }
                        for w, b in pairs
                    ],
                }
                write_json(self.root / "generations" / f"g{g}.json", decision)
                log_event(self.root, event="generation", **decision)
            nxt = {
                "round": g + 1,
                "score": entries[self.id]["score"],
                "hparams": entries[self.id]["hparams"],
            }
            source = dict(pairs).get(self.id)
            if source is not None:
                rng = np.random.default_rng([self.pop.seed, self.id, g])
                nxt.update(self.adopt(entries[source], rng))
                log_event(
                    self.root,
                    event="adopt",
                    member=self.id,
                    round=g,
                    source=entries[source]["id"],
                    source_score=entries[source]["score"],
                    score=nxt["score"],
                    algo=entries[source]["algo"],
                    mutated=nxt.pop("mutated"),
                )
            else:
                nxt["start_step"] = entries[self.id]["global_step"]
            self.commit(**nxt)


# ---------------------------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------------------------
def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def default_dir(pop: PopArgs, algo_argv: list[str]) -> str:
    _, _, args = member_args(pop, algo_argv, 0)
    name = "+".join(Path(a).stem for a in pop.algo)
    return str(Path("runs") / f"pop__{name}__{args.env}__{time.strftime('%Y%m%d-%H%M%S')}")


def check(pop: PopArgs, algo_argv: list[str]) -> None:
    """Fail before any process starts: bad numbers, unknown flags, unknown env ids."""
    if pop.population < 1 or pop.rounds < 1 or pop.steps_per_round < 1:
        raise UserError("--population, --rounds and --steps-per-round must be positive")
    if pop.perturb <= 0 or pop.temperature <= 0 or not 0 < pop.replace_fraction <= 0.5:
        raise UserError(
            "--perturb and --temperature must be > 0 and --replace-fraction in (0, 0.5]"
        )
    import envs

    checked = set()
    for m in range(pop.population):  # every member's flags parse (tyro names a wrong one)
        path, mod, args = member_args(pop, algo_argv, m)
        mutable_keys(pop, args)
        # env steps per iteration
        batch = getattr(args, "num_envs", 1) * getattr(args, "num_steps", 1)
        if pop.steps_per_round % batch:
            print(
                f"warning: --steps-per-round {pop.steps_per_round} is not a multiple of {path}'s "
                f"{batch} steps per iteration; a round trains about "
                f"{pop.steps_per_round // batch * batch} (round it to "
                f"{-(-pop.steps_per_round // batch) * batch})",
                file=sys.stderr,
            )
        # the file's own checks: action space, sizes (unknown env ids fail in make)
        if path not in checked:
            checked.add(path)
            env = envs.make(args.env, num_envs=1)
            try:
                if hasattr(mod, "check_args"):
                    mod.check_args(dataclasses.replace(args, total_steps=pop.steps_per_round), env)
            finally:
                env.close()


def worker(pop: PopArgs, algo_argv: list[str]) -> None:
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    torch.set_num_threads(member_threads(pop))
    root = Path(pop.dir)
    store, hosted = connect_store(pop.wait_timeout)
    heartbeat = Heartbeat(rank, pop.wait_timeout)
    board = Leaderboard(root, store, pop.keep)
    member = Member(pop, algo_argv, root, rank, store, board)
    if pop.mode == "tournament":
        member.run_tournament()
    else:
        member.run_generational(world)
    log_event(root, event="done", member=rank, score=member.state["score"])
    board.write_index()
    store.set(f"done/m{rank}", "1")
    # the store lives in this process: keep it up until every member is done or gone
    if hosted and rank == 0:
        gone = wait_for_members(
            store, {m: f"done/m{m}" for m in range(world)}, pop.heartbeat_timeout
        )
        if gone:
            log_event(root, event="left", member=rank, gone=gone)
    heartbeat.stop.set()


def plot_population(root: Path) -> Path:
    """Score after each round vs the population's total environment steps: every member's rounds
    and the best so far."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = sorted(
        (e for e in read_events(root) if e["event"] == "round"), key=lambda e: e["time"]
    )
    fig, ax = plt.subplots(figsize=(7, 4))
    total, best, xs, ys = 0, -math.inf, [], []
    by_member: dict[int, list] = {}
    for e in rounds:
        total += e["trained"]
        best = max(best, e["score"])
        xs.append(total)
        ys.append(best)
        by_member.setdefault(e["member"], []).append((total, e["score"]))
    for m, pts in sorted(by_member.items()):
        ax.plot(*zip(*pts), ".", alpha=0.5, label=f"member {m}")
    if xs:
        ax.step(xs, ys, where="post", color="k", label="best so far")
    ax.set_xlabel("population environment steps")
    ax.set_ylabel("deterministic eval return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out = root / "population.png"
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def launch(pop: PopArgs, pop_argv: list[str], algo_argv: list[str]) -> int:
    """Run the population under `torchrun --standalone` on this machine; print the leaderboard."""
    check(pop, algo_argv)
    root = Path(pop.dir or default_dir(pop, algo_argv))
    root.mkdir(parents=True, exist_ok=True)
    write_json(
        root / "population.json",
        {**dataclasses.asdict(pop), "dir": str(root), "algo_argv": algo_argv},
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(pop.population),
        "--max-restarts",
        str(pop.max_restarts),
        "-m",
        "population",
        *pop_argv,
        "--dir",
        str(root),
        "--",
        *algo_argv,
    ]
    print(f"population of {pop.population} ({pop.mode}) in {root}", flush=True)
    # `-m population` from any cwd
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        cmd,
        env=dict(
            os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), PYTHONPATH=path
        ),
    )
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        proc.wait()
        print(f"\ninterrupted; run the same command with --dir {root} to continue", file=sys.stderr)
        return 130
    board = read_json(root / "leaderboard.json", [])
    print(
        f"\nleaderboard ({root / 'leaderboard.json'}; score: deterministic evaluation over "
        f"{pop.eval_episodes} episodes, seed {pop.eval_seed}, the same for every entry):"
    )
    print("| rank | entry | score | steps | algo | hyper-parameters |\n|---|---|---|---|---|---|")
    for i, e in enumerate(board[:10]):
        print(
            f"| {i + 1} | {e['id']} | {e['score']:.1f} | {e['global_step']:,} | "
            f"{Path(e['algo']).stem} | {e['hparams']} |"
        )
    if board:
        print(f"\nbest checkpoint: {board[0]['checkpoint']}\ncurves: {plot_population(root)}")
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pop_argv, algo_argv = split_argv(argv)
    pop = cli(PopArgs, description=__doc__, argv=pop_argv)
    if "WORLD_SIZE" in os.environ:  # a torchrun worker: one member
        if pop.dir is None:
            raise UserError("under torchrun pass --dir (a directory every worker can reach)")
        worker(pop, algo_argv)
        return 0
    pop_argv = [
        a
        for i, a in enumerate(pop_argv)
        if a != "--dir" and (i == 0 or pop_argv[i - 1] != "--dir") and not a.startswith("--dir=")
    ]
    try:
        return launch(pop, pop_argv, algo_argv)
    # bad input: one clear line, no traceback, nothing started
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    sys.exit(main())
