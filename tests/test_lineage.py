"""The shape of the house, held by tests: every algorithm file's declared lineage (its parent and
family), the thin variants' diff budgets, the feature matrix, file sizes and the direction of
imports.

The files' declarations (`PARENT, FAMILY = ...`, read by `conftest.declaration`) are the single
source of the README's algorithms table (`lineage()`) and `features()` of CONTRIBUTING.md's feature
matrix: `python tests/test_lineage.py` prints both tables (`--update-readme` writes them into the
two files), and the tests fail when a copy there differs, when a thin variant's diff grows past its
budget, or when a file's features drift from its family's.

Changed lines are counted as `diff -w` counts them on the files' code: docstrings (module, class,
function and the `Args` field docstrings), blank lines and indentation are left out, so a block
moved into a function (the Podracer files' explore/learn closures) counts once, not as removed and
re-added.
"""

from __future__ import annotations

import ast
import difflib
import re
import sys
from pathlib import Path

import pytest
from conftest import ALGO_FILES, FAMILIES, declaration, docstring_lines, prose_lines

ROOT = Path(__file__).resolve().parents[1]
ALGOS = ROOT / "algos"
# Lines of every algorithm file as `ruff format` lays it out at 100 columns, docstrings included
# (490 at 120 columns until the run shell left the files), and of the three files a variant is
# most often copied from
# (420, not 400, since the PPO variants carry their parent's Box2D rows: ten lines of a table)
MAX_LINES = 420  # lines of an algorithm file as `ruff format` lays it out at 100 columns
WIDTH = 100  # no line of an algorithm file is wider (tests/test_format.py: every file)
# The thin variants: a diff against the parent that reads as the paper's short list of changes (the
# H-term, double and dueling DQN, TD3 from DDPG), held to a budget. Every other file's diff is
# reported in the README's algorithms table, not held.
THIN_BUDGET = 90
THIN = ("ppo_h", "ddpg_h", "td3_h", "sac_h", "double_dqn", "d3qn", "td3")
# The README's words for a file and the actions it takes; a file not named here shows its
# docstring's first line and its family's actions.
FAMILY_ACTIONS = {
    "PPO": "discrete, multi-discrete, continuous",
    "DQN": "discrete",
    "DDPG/TD3/SAC": "continuous",
    "multi-agent": "multi-agent",
}
ABOUT = {
    "ppo_vec": "PPO-Clip + GAE on vectorized envs (the flagship)",
    "ppo_podracer": "ppo_vec + torchrun model fusion (Podracer)",
    "a2c": "A2C: one policy-gradient step per rollout, GAE",
    "ppo_h": "PPO + H-term",
    "ppo_rnn": "recurrent PPO: GRU actor and critic, whole-sequence minibatches, truncated BPTT",
    "dqn": "DQN: target network, epsilon-greedy, device replay buffer",
    "double_dqn": "Double DQN (decoupled target action selection)",
    "d3qn": "dueling + double DQN",
    "pqn": "PQN: no replay, no target network; LayerNorm Q-network, Q(lambda) over the "
    "vectorized rollout",
    "ddpg": "DDPG (Gaussian exploration noise)",
    "ddpg_h": "DDPG + H-term",
    "td3": "TD3: clipped double Q, delayed policy, target smoothing",
    "td3_h": "TD3 + H-term",
    "fast_td3": "FastTD3: td3 + n-step returns, per-sub-env mixed exploration noise, large batches",
    "td3_podracer": "td3 + explore/learn pipeline + torchrun model fusion (Podracer)",
    "sac": "SAC: squashed Gaussian, twin critics, learned temperature",
    "sac_h": "SAC + H-term",
    "sac_podracer": "sac + explore/learn pipeline + torchrun model fusion (Podracer)",
    "modsac": "SAC with the policy-update frequency following the critic loss",
    "redq": "REDQ: 10 critics, random-subset min of 2, update-to-data ratio G",
    "mappo": "MAPPO: shared (or per-agent) actors, centralized V(state), value normalization",
    "vdn": "VDN: Q_tot = sum of agent Qs, shared agent net with agent id",
    "qmix": "QMIX: monotonic mixing network from state hypernetworks",
    "maddpg": "MADDPG: decentralized actors, centralized critics on state + all actions",
    "matd3": "MATD3: MADDPG + twin critics, delayed actors, target smoothing",
}
ACTIONS = {
    "mappo": "discrete, multi-agent",
    "vdn": "discrete, multi-agent",
    "qmix": "discrete, multi-agent",
    "maddpg": "continuous, multi-agent",
    "matd3": "continuous, multi-agent",
}
# Where each file's learning is on record, beside a peer or a published figure where one ran (the
# README's "results" column; tests/test_links.py checks every path)
R = "bench/results/"
TABLES_OF = {
    "MuJoCo": R + "locomotion/locomotion.md",
    "MuJoCo 1M": R + "mujoco-offpolicy/mujoco-offpolicy.md",
    "Box2D": R + "box2d/box2d.md",
    "SB3": R + "peers/peers.md",
    "Atari": R + "atari/atari.md",
    "MinAtar": R + "minatar/minatar.md",
    "JAX": R + "jax/jax.md",
    "GPU": R + "gpu/gpu.md",
    "Pendulum": R + "offpolicy/offpolicy.md",
    "update": R + "offpolicy_update.md",
    "held-out seeds": R + "stable/stable.md",
    "H-term": R + "hterm.md",
    "pipeline": R + "pipeline/pipeline.md",
    "MPE": R + "marl.md",
    "Pendulum sweep": R + "sweeps/ppo_podracer_Pendulum-v1_row.md",
}
RESULTS = {
    "ppo_vec": ("MuJoCo", "Box2D", "SB3", "Atari", "JAX"),
    "a2c": ("held-out seeds",),
    "ppo_podracer": ("Pendulum sweep",),
    "ppo_h": ("H-term", "Box2D", "held-out seeds"),
    "ppo_beta": ("Box2D",),
    "ppo_rnn": ("held-out seeds",),
    "dqn": ("SB3", "MinAtar"),
    "double_dqn": ("held-out seeds",),
    "d3qn": ("held-out seeds",),
    "pqn": ("SB3", "MinAtar", "Atari", "JAX"),
    "ddpg": ("Pendulum", "held-out seeds"),
    "ddpg_h": ("held-out seeds",),
    "td3": ("MuJoCo 1M", "Box2D", "SB3", "Pendulum", "update"),
    "td3_h": ("H-term", "held-out seeds"),
    "fast_td3": ("GPU", "held-out seeds"),
    "td3_podracer": ("pipeline",),
    "sac": ("MuJoCo 1M", "Box2D", "SB3", "Pendulum", "update"),
    "sac_h": ("H-term", "held-out seeds"),
    "sac_podracer": ("pipeline",),
    "modsac": ("Pendulum", "held-out seeds"),
    "redq": ("Pendulum", "held-out seeds"),
    "mappo": ("MPE",),
    "vdn": ("MPE",),
    "qmix": ("MPE",),
    "maddpg": ("MPE",),
    "matd3": ("MPE",),
}
HOW_TO_DECLARE = (
    'declare its parent and family under its ALGO line: `PARENT, FAMILY = "td3", "DDPG/TD3/SAC"` '
    f"(PARENT: the file it was copied from, None for a new root; FAMILY: one of {FAMILIES}); "
    "CONTRIBUTING.md, 'Make a variant'"
)


def registration_problems(algos: Path = ALGOS) -> list[str]:
    """What keeps the files in `algos` from joining the repository: a missing or unknown
    declaration, a parent that does not exist (one message each)."""
    out = []
    for path in sorted(algos.glob("*.py")):
        if path.stem == "__init__":
            continue
        found = declaration(path.stem, algos)
        if found is None:
            out.append(f"algos/{path.name}: {HOW_TO_DECLARE}")
            continue
        parent, family = found
        if family not in FAMILIES:
            out.append(f"algos/{path.name}: FAMILY {family!r} is not one of {FAMILIES}")
        if parent is not None and not (algos / f"{parent}.py").is_file():
            out.append(f"algos/{path.name}: PARENT {parent!r}: there is no algos/{parent}.py")
    return out


def _docstring_line(name: str) -> str:
    doc = ast.get_docstring(ast.parse((ALGOS / f"{name}.py").read_text())) or name
    return doc.splitlines()[0].rstrip(".")


def lineage() -> list[tuple[str, str, str | None, str, str]]:
    """(file, README text, parent, family, actions) of every declared file: by family, then each
    file after its parent."""
    declared = {n: d for n in ALGO_FILES if (d := declaration(n)) is not None}

    def ancestry(name: str) -> tuple[str, ...]:
        parent = declared[name][0]
        return (*ancestry(parent), name) if parent in declared and parent != name else (name,)

    rows = [
        (
            name,
            ABOUT.get(name) or _docstring_line(name),
            parent,
            family,
            ACTIONS.get(name, FAMILY_ACTIONS.get(family, "")),
        )
        for name, (parent, family) in declared.items()
    ]
    order = {f: i for i, f in enumerate(FAMILIES)}
    return sorted(rows, key=lambda r: (order.get(r[3], len(order)), ancestry(r[0])))


def code_lines(path: Path) -> list[str]:
    """The file's code as `diff -w` reads it: docstrings, blank lines and indentation left out."""
    src = path.read_text()
    docstrings = docstring_lines(src)
    return [
        line.strip()
        for i, line in enumerate(src.splitlines(), 1)
        if i not in docstrings and line.strip()
    ]


def changed_lines(parent: str, child: str) -> int:
    a, b = code_lines(ALGOS / f"{parent}.py"), code_lines(ALGOS / f"{child}.py")
    return sum(1 for line in difflib.ndiff(a, b) if line[:2] in ("- ", "+ "))


# ---- the feature matrix: read from each file's Args and code, never written by hand --------------
def _class_fields(path: Path, name: str) -> tuple[set[str], list[str]]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return {s.target.id for s in node.body if isinstance(s, ast.AnnAssign)}, [
                ast.unparse(b) for b in node.bases
            ]
    raise AssertionError(f"{path.name} has no {name} dataclass")


def _args_fields(path: Path) -> set[str]:
    """The fields of a file's `Args`, the run header it inherits (`common.cli.RunArgs`) included."""
    fields, bases = _class_fields(path, "Args")
    assert bases == ["RunArgs"], (
        f"{path.name}: `class Args(RunArgs)` (the shared run header of common/cli.py)"
    )
    return fields | _class_fields(ROOT / "common" / "cli.py", "RunArgs")[0]


FEATURES = {  # column: (what it means, test on (Args fields, source))
    "torchrun": ("multi-process learners, model fusion", lambda a, s: "distributed.init(" in s),
    "pipeline": ("`--pipeline` explore/learn overlap", lambda a, s: "pipeline" in a),
    "compile": ("`--compile`", lambda a, s: "compile" in a),
    "PER": ("`--per` prioritized replay", lambda a, s: "per" in a),
    "colored noise": (
        "`--noise-color` pink/red exploration noise",
        lambda a, s: "noise_color" in a,
    ),
    "normalizers": (
        "`--norm-obs` / `--norm-reward`",
        lambda a, s: (
            "/".join(n for n, f in (("obs", "norm_obs"), ("reward", "norm_reward")) if f in a) or ""
        ),
    ),
    # (the run shell, common/run.py, does these for a file whose loop is `run.iterations`)
    "resume": (
        "`--resume` exact",
        lambda a, s: "resume" in a and ("set_rng_state(" in s or "run.start(" in s),
    ),
    "NaN guard": ("NumericGuard", lambda a, s: "NumericGuard(" in s or "run.guard" in s),
    "evaluation": (
        "`--eval-every` deterministic eval",
        lambda a, s: "eval_every" in a and ("evaluate(" in s or "run.iterations(" in s),
    ),
    "load_policy": ("`load_policy(path)` for export", lambda a, s: "\ndef load_policy(" in s),
    "per-env defaults": (
        "`--env X` starts from the task's `TASK_DEFAULTS` row (`--env X --help` lists them)",
        lambda a, s: "defaults_for=default_args" in s and "TASK_DEFAULTS" in s,
    ),
    "tracking": (
        "`--track` (W&B), TensorBoard events by default (`--no-tensorboard`)",
        lambda a, s: "track" in a and "tensorboard" in a,
    ),
    "critic group": (
        "asymmetric critic: a `critic` observation group feeds the value function",
        lambda a, s: re.search(r"check_single_agent\([^)]*groups=True", s) is not None,
    ),
    "action masks": (
        '`info["action_mask"]` applied (masked logits / masked argmax)',
        lambda a, s: "masks=True" in s,
    ),
    "adaptive lr": (
        "`--lr-schedule adaptive --desired-kl` (rsl_rl's KL rule)",
        lambda a, s: "lr_schedule" in a,
    ),
    "CUDA graph": (
        "on CUDA each iteration (off-policy: each step's updates) replays as one CUDA graph "
        "(`--no-capture`: eager)",
        lambda a, s: "capture" in a and "run.capture(" in s,
    ),
    "pixels": (
        "uint8 image observations through a conv encoder (`common/encoders.py`)",
        lambda a, s: "images=True" in s and "encoders.layers(" in s,
    ),
}


def features() -> dict[str, dict[str, str]]:
    out = {}
    for name, *_ in lineage():
        path = ALGOS / f"{name}.py"
        fields, src = _args_fields(path), path.read_text()
        row = {}
        for col, (_, test) in FEATURES.items():
            v = test(fields, src)
            row[col] = v if isinstance(v, str) else ("yes" if v else "")
        out[name] = row
    return out


def algorithms_table() -> str:
    rows = [
        "| file | algorithm | parent | changed lines | actions | results |",
        "|---|---|---|---:|---|---|",
    ]
    families = {name: family for name, _, _, family, _ in lineage()}
    for name, what, parent, family, actions in lineage():
        if parent is None:
            diff = ""
        elif families.get(parent) != family:
            diff = "port"  # to another setting: where it came from, not a diff to read
        else:
            n = changed_lines(parent, name)
            diff = f"{n} (<= {THIN_BUDGET})" if name in THIN else str(n)
        results = ", ".join(f"[{t}]({TABLES_OF[t]})" for t in RESULTS.get(name, ()))
        rows.append(
            f"| `algos/{name}.py` | {what} | {parent or ''} | {diff} | {actions} | {results} |"
        )
    return "\n".join(rows)


def feature_table() -> str:
    cols = list(FEATURES)
    rows = ["| file | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for name, row in features().items():
        rows.append(f"| {name} | " + " | ".join(row[c] for c in cols) + " |")
    return "\n".join(rows)


# where each generated table lives: the algorithms table on the README's first screen, the feature
# matrix with the maintainer rules
TABLES = {
    "algorithms": ("README.md", "## Algorithms"),
    "features": ("CONTRIBUTING.md", "## Feature matrix"),
}


def _readme_table(after: str, doc: str = "README.md") -> str:
    text = (ROOT / doc).read_text()
    i = text.index(after)
    lines = text[i:].splitlines()
    start = next(k for k, l in enumerate(lines) if l.startswith("|"))
    end = next((k for k in range(start, len(lines)) if not lines[k].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


# ---- tests ---------------------------------------------------------------------------------------
def test_every_algorithm_file_declares_its_parent_and_family():
    problems = registration_problems()
    assert not problems, "\n".join(problems)


def test_a_copied_file_with_its_declaration_joins_and_one_without_is_named(tmp_path):
    """What "Make a variant" promises: a copy of td3.py with its name and declaration changed
    passes the registration checks and runs with td3's test settings; a copy without a declaration
    gets one message naming what to add."""
    from conftest import small_settings

    for name in ("ddpg", "td3"):
        (tmp_path / f"{name}.py").write_text((ALGOS / f"{name}.py").read_text())
    src = (ALGOS / "td3.py").read_text().replace('ALGO = "td3"', 'ALGO = "my_td3"')
    mine = src.replace('PARENT, FAMILY = "ddpg",', 'PARENT, FAMILY = "td3",')
    (tmp_path / "my_td3.py").write_text(mine)
    assert registration_problems(tmp_path) == []
    assert small_settings("my_td3", tmp_path) == small_settings("td3")
    undeclared = "\n".join(l for l in mine.splitlines() if not l.startswith("PARENT, FAMILY"))
    (tmp_path / "my_td3.py").write_text(undeclared)
    (problem,) = registration_problems(tmp_path)
    assert problem.startswith("algos/my_td3.py: declare its parent and family") and (
        'PARENT, FAMILY = "' in problem
    ), problem


@pytest.mark.parametrize("child", THIN)
def test_thin_variants_diff_within_budget(child):
    parent = declaration(child)[0]
    n = changed_lines(parent, child)
    assert n <= THIN_BUDGET, (
        f"`diff -w algos/{parent}.py algos/{child}.py` changes {n} code lines, over the budget of "
        f"{THIN_BUDGET} of a thin variant: a feature landed in one file of the family only (put it "
        "in every file of the family, or in its own variant file)"
    )


def test_line_counter_ignores_docstrings_blank_lines_and_indentation(tmp_path, monkeypatch):
    a = 'def f(x):\n    """doc"""\n    return x\n'
    b = 'def f(x):\n    """another doc,\n    two lines"""\n\n    if x:\n        return x\n'
    (tmp_path / "a.py").write_text(a)
    (tmp_path / "b.py").write_text(b)
    monkeypatch.setattr(sys.modules[__name__], "ALGOS", tmp_path)
    assert changed_lines("a", "b") == 1  # only `if x:` is new; the re-indented return is not


@pytest.mark.parametrize("name", ALGO_FILES)
def test_algorithm_file_size(name):
    lines = (ALGOS / f"{name}.py").read_text().splitlines()
    assert len(lines) <= MAX_LINES, (
        f"algos/{name}.py has {len(lines)} lines (at most {MAX_LINES}): move plumbing to common/"
    )
    wide = [i for i, line in enumerate(lines, 1) if len(line) > WIDTH]
    assert not wide, f"algos/{name}.py: lines {wide} are wider than {WIDTH} characters"


def test_readme_tables_match_the_files():
    doc, after = TABLES["algorithms"]
    assert _readme_table(after, doc) == algorithms_table(), (
        f"{doc}'s algorithms table is stale: run `python tests/test_lineage.py --update-readme`"
    )
    doc, after = TABLES["features"]
    assert _readme_table(after, doc) == feature_table(), (
        f"{doc}'s feature matrix is stale: run `python tests/test_lineage.py --update-readme`"
    )


def test_families_have_their_features_uniformly():
    """Within a family (its declared files but the Podracer ones, where parallelism lives: the
    files that run under torchrun), a feature is in every file or in none."""
    feats = features()
    families: dict[str, list[str]] = {}
    for name, _, _, family, _ in lineage():
        if feats[name]["torchrun"] != "yes":
            families.setdefault(family, []).append(name)
    uniform = [
        "torchrun",
        "pipeline",
        "compile",
        "resume",
        "NaN guard",
        "evaluation",
        "load_policy",
        "tracking",
    ]
    per_family = {
        "PPO": ["per-env defaults", "critic group", "action masks"],
        "DDPG/TD3/SAC": ["PER", "normalizers", "per-env defaults"],
        "DQN": ["per-env defaults", "action masks"],
    }
    for family, files in families.items():
        for col in uniform + per_family.get(family, []):
            values = {feats[f][col] for f in files}
            assert len(values) == 1, f"{family} family: {col} differs across files: " + ", ".join(
                f"{f}={feats[f][col]!r}" for f in files
            )
    for name in feats:
        for col in ("compile", "resume", "NaN guard", "evaluation", "load_policy", "tracking"):
            assert feats[name][col] == "yes", f"{name} lacks {col}"


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


EVALUATION_MODULE = "evaluate.py"  # the one common module that builds eval envs (imports envs)


def test_imports_go_one_way():
    for path in sorted((ROOT / "common").glob("*.py")):
        mods = _imports(path)
        assert not any(m == "algos" or m.startswith("algos.") for m in mods), (
            f"common/{path.name} imports algos"
        )
        if path.name != EVALUATION_MODULE:
            assert not any(m == "envs" or m.startswith("envs.") for m in mods), (
                f"common/{path.name} imports envs"
            )
    for path in sorted((ROOT / "envs").glob("*.py")):
        mods = _imports(path)
        bad = [
            m
            for m in mods
            if m.startswith("algos")
            or m.startswith("common.evaluate")
            or m.startswith("population")
        ]
        assert not bad, f"envs/{path.name} imports {bad}"
    for path in sorted(ALGOS.glob("*.py")):
        mods = _imports(path)
        bad = [
            m
            for m in mods
            if m.split(".")[0] not in _ALLOWED_TOP
            and m.split(".")[0] not in sys.stdlib_module_names
        ]
        assert not bad, (
            f"algos/{path.name} imports {bad}: an algorithm file imports only "
            f"common/, envs/ and libraries"
        )


_ALLOWED_TOP = {"common", "envs", "torch", "numpy", "gymnasium", "tyro", "__future__"}


def test_no_python_loop_over_sub_envs():
    pattern = re.compile(r"for \w+ in range\((args\.)?num_envs|for \w+ in range\(N\)")
    for path in sorted(ALGOS.glob("*.py")):
        hits = [l for l in path.read_text().splitlines() if pattern.search(l)]
        assert not hits, f"algos/{path.name} loops over sub-envs in Python: {hits}"


def update_readme() -> None:
    """Rewrite the README's algorithms table and CONTRIBUTING.md's feature matrix from the files."""
    for key, table in (("algorithms", algorithms_table()), ("features", feature_table())):
        doc, after = TABLES[key]
        path = ROOT / doc
        text = path.read_text()
        old = _readme_table(after, doc)
        if old in text:
            path.write_text(text.replace(old, table, 1))


if __name__ == "__main__":
    if "--update-readme" in sys.argv:
        update_readme()
    print("## Algorithms table\n")
    print(algorithms_table())
    print("\n### Feature matrix\n")
    print(feature_table())
    print("\n" + "\n".join(f"- {c}: {d}" for c, (d, _) in FEATURES.items()))


# a measurement in prose: a speed-up ("1.7x"), a time of a run ("3.3 s of training", "~60 us per
# update"), a rate ("250,715 env-steps/s"), a machine ("H200"); numbers that define a task or a rule
# ("5 x 5 grid", "lr / 1.5") pass
MEASUREMENT = re.compile(
    r"(?<![(\w.])\d+(\.\d+)?x\b(?! ?\d)|"
    r"\d[\d,.]* ?(ms|us|µs|s|seconds|minutes) (of training|a run|each|per|a call)\b|"
    r"\d[\d,]* env-steps/s|\bH[12]00\b"
)


def test_measurements_live_in_bench_not_in_the_code():
    """Issue 56: comments and docstrings of algos/, common/ and envs/ say why, not how much;
    measured numbers rot there, so they live in bench/ (a comment may point to
    bench/NOTES.md#defaults-the-evidence)."""
    found = [
        f"{p.relative_to(ROOT)}:{i}: {text.strip()}"
        for d in ("algos", "common", "envs")
        for p in sorted((ROOT / d).rglob("*.py"))
        for i, text in prose_lines(p)
        if MEASUREMENT.search(text)
    ]
    assert not found, "measurements in the code (move them to bench/NOTES.md):\n" + "\n".join(found)
