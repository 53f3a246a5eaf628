"""Environment entry point: `envs.make(env_id, num_envs=..., device=..., seed=...)`.

Torch-native batched implementations are used for the ids in `NATIVE`; the MuJoCo locomotion
tasks (`Ant-v5`, ..., short aliases `Ant`, ...) run batched in `envs.mujoco_locomotion`; any other
gymnasium id goes through `gymnasium.make_vec` behind the same torch-tensor contract
(`envs.gym_adapter`). `Chasing-v0` (`envs.chasing`, an agent chasing a randomly moving target, the
chasing demo of ElegantRL's VecEnv tutorial) is native too and takes `dim` (default 2), e.g.
`envs.make("Chasing-v0", num_envs=N, dim=3)`; `envs.chasing.pursuit_policy` is its scripted
baseline. `StockTrading-v0` (`envs.stock_trading`, FinRL-style multi-stock trading on skfolio's S&P
500 data or a CSV named by `STOCK_TRADING_CSV`) is native and takes `split`, `data`, `initial_cash`,
... The multi-agent MPE tasks in `MULTI_AGENT` (`simple_spread`, `simple_tag`,
also under mpe2's names `simple_spread_v3`, `simple_tag_v3`) follow `common/ma_vec_env.py`.
MinAtar's five games (`MINATAR`: `MinAtar/Breakout-v1`, ..., `Breakout-MinAtar`; envs/minatar.py)
are batched torch ports with uint8 `(C, 10, 10)` image observations; Atari games (`ALE/<Game>-v5`)
run in ale-py's C++ vector env with DQN's preprocessing (envs/atari.py).
"""

from __future__ import annotations

import difflib

import torch

from envs.chasing import Chasing
from envs.classic_control import Acrobot, CartPole, MountainCar, MountainCarContinuous, Pendulum
from envs.masked import GridReach, MaskedWalk, UnmaskedWalk
from envs.minatar import GAMES, IDS as MINATAR
from envs.mpe import SimpleSpread, SimpleTag
from envs.partial import CARTPOLE_NOISE as NOISE, factory as _partial

from common.cli import MUJOCO_TASKS
from common.errors import UserError, UserTypeError


def _stock_trading(*args, **kwargs):
    """`envs.stock_trading.StockTrading`, imported on first use (so that `import envs` does not load
    the stock data code)."""
    from envs.stock_trading import StockTrading as cls

    return cls(*args, **kwargs)


NATIVE = {
    "CartPole-v1": CartPole,
    "Acrobot-v1": Acrobot,
    "MountainCar-v0": MountainCar,
    "MountainCarContinuous-v0": MountainCarContinuous,
    "Pendulum-v1": Pendulum,
    "Chasing-v0": Chasing,  # not a gymnasium task: our own (envs/chasing.py)
    # not a gymnasium task: multi-stock daily trading (envs/stock_trading.py)
    "StockTrading-v0": _stock_trading,
    # not gymnasium tasks: action masks and MultiDiscrete actions (envs/masked.py)
    "MaskedWalk-v0": MaskedWalk,
    "MaskedWalk-NoMask-v0": UnmaskedWalk,
    "GridReach-v0": GridReach,
}


def _genesis_go2(*args, **kwargs):
    """`envs.genesis_go2.make_go2` (Genesis imported on first use: `pip install genesis-world`)."""
    from envs.genesis_go2 import make_go2

    return make_go2(*args, **kwargs)


# variants of the native tasks: partially observed (envs/partial.py), with a `critic` observation
# group holding the full state (-Privileged) for the asymmetric critic of the PPO files
VARIANTS = {
    "CartPoleNoVel-v0": _partial(CartPole, (0, 2), False, "CartPoleNoVel-v0"),
    "CartPoleNoVel-Privileged-v0": _partial(CartPole, (0, 2), True, "CartPoleNoVel-Privileged-v0"),
    "CartPoleNoisy-v0": _partial(CartPole, None, False, "CartPoleNoisy-v0", NOISE),
    "CartPoleNoisy-Privileged-v0": _partial(
        CartPole, None, True, "CartPoleNoisy-Privileged-v0", NOISE
    ),
}

# external simulators behind envs.from_rsl_rl.FromRslRl (their packages are not project
# dependencies)
EXTERNAL = {
    # Unitree Go2 walking in Genesis (envs/genesis_go2.py), with a critic group
    "GenesisGo2-v0": _genesis_go2,
    # policy group only
    "GenesisGo2-NoCritic-v0": lambda *a, **kw: _genesis_go2(*a, privileged_critic=False, **kw),
}

# multi-agent tasks (`common/ma_vec_env.py` contract), under our ids and mpe2's
MULTI_AGENT = {
    "simple_spread": SimpleSpread,
    "simple_spread_v3": SimpleSpread,
    "simple_tag": SimpleTag,
    "simple_tag_v3": SimpleTag,
}

# user envs added with `register` (checked against the vec-env contract when made)
CUSTOM: dict = {}


def register(env_id: str, factory) -> None:
    """Make a torch vec env of your own available as `env_id` to `make` and so to every algorithm
    file (`main(Args(env=env_id))`). `factory(num_envs=..., device=..., seed=..., **kwargs)` returns
    an object that keeps the contract of `common/vec_env.py` (subclass
    `envs.base.TorchVecEnv`); `make` checks it with one reset and one step
    (`envs.base.check_env`) before training starts. A gymnasium env (numpy, one sub-env) needs
    no registration here: register it with gymnasium and pass its id. From the command line,
    `--env package.module:factory` imports and registers the factory."""
    if not callable(factory):
        raise UserTypeError(
            f"register({env_id!r}, factory): factory must be callable, got {type(factory).__name__}"
        )
    if (
        env_id in NATIVE
        or env_id in MINATAR
        or env_id in VARIANTS
        or env_id in EXTERNAL
        or env_id in MULTI_AGENT
        or mujoco_id(env_id) is not None
    ):
        raise UserError(
            f"{env_id!r} is one of the library's own env ids: register yours under another id"
        )
    CUSTOM[env_id] = factory


def _import_factory(spec: str):
    """`package.module:factory` -> the factory (imported from the working directory or sys.path)."""
    import importlib
    import sys

    module, _, attr = spec.partition(":")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: the user's own modules in the current directory
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise UserError(
            f"--env {spec!r}: cannot load factory {attr!r} from module {module!r} ({e}); name an "
            f"importable module and a factory(num_envs, device, seed, **kw) in it, e.g. "
            f"my_tasks:make_go2"
        ) from None
    if not callable(factory):
        raise UserError(
            f"--env {spec!r}: {module}.{attr} is a {type(factory).__name__}, not a factory"
        )
    return factory


MUJOCO_IDS = tuple(f"{name}-v5" for name in MUJOCO_TASKS)
MUJOCO_ALIASES = {k.split("-")[0]: k for k in MUJOCO_IDS}


def mujoco_id(env_id: str) -> str | None:
    """The batched MuJoCo task an id names (`Ant` -> `Ant-v5`), or None."""
    return env_id if env_id in MUJOCO_IDS else MUJOCO_ALIASES.get(env_id)


def make(
    env_id: str,
    num_envs: int = 1,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    **kwargs,
):
    """Make a vectorized env with torch tensors on `device` (see `common/vec_env.py`).

    `vectorization_mode` ("sync" / "async") picks how gymnasium ids run their host sub-envs
    (default: async from 8 envs when the run has 4+ simulator threads, `envs.gym_adapter`);
    torch-native envs ignore it. MuJoCo tasks take
    `backend` ("auto" | "batch" | "warp") and `nthread` (CPU threads of the batch backend).
    Multi-agent MPE tasks take their mpe2 options (`continuous_actions`, `max_cycles`, `N`,
    `local_ratio`, `num_good`, ...) and return a `MultiAgentTorchVecEnv`.
    """
    if not isinstance(env_id, str):
        raise UserError(
            f"an env id is a string (e.g. 'CartPole-v1'), got {type(env_id).__name__} {env_id!r}"
        )
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs <= 0:
        raise UserError(f"num_envs must be a positive integer (--num-envs), got {num_envs!r}")
    if num_envs > MAX_NUM_ENVS:
        raise UserError(
            f"num_envs={num_envs:,} is more sub-envs than one process holds (at most "
            f"{MAX_NUM_ENVS:,}); use fewer, or spread them over processes with torchrun"
        )
    if seed is not None:
        from common.device import check_seed

        check_seed(seed)
    device = _check_device(device)
    try:
        return _make(env_id, num_envs, device, seed, **kwargs)
    # an option this env does not take: the user's keyword, named by the call's TypeError
    except TypeError as e:
        name = str(e).rsplit("unexpected keyword argument", 1)[-1].strip(" '")
        if "unexpected keyword argument" not in str(e) or name not in kwargs:
            raise
        raise UserError(
            f"{env_id} takes no option {name!r} (envs.make({env_id!r}, {name}=...)); see the env's "
            f"class for the options it takes"
        ) from None


MAX_NUM_ENVS = 2**26


def _check_device(device) -> torch.device:
    """`device` as a torch.device on which envs run (cpu or an available cuda), or a one-line
    ValueError."""
    if not isinstance(device, (str, torch.device)):
        raise UserError(
            f"device is a string or torch.device ('cpu', 'cuda', 'cuda:N'), got {device!r}"
        )
    from common.device import resolve_device

    return resolve_device(device)


def _make(env_id: str, num_envs: int, device, seed, **kwargs):
    backend = kwargs.get("backend", "auto")
    if backend not in ("auto", "batch", "warp"):
        raise UserError(f"unknown MuJoCo backend {backend!r}: choose auto, batch or warp")
    if mujoco_id(env_id) is not None and env_id not in CUSTOM:
        kwargs.pop("vectorization_mode", None)
        from envs.mujoco_locomotion import make_mujoco

        return make_mujoco(env_id, num_envs=num_envs, device=device, seed=seed, **kwargs)
    kwargs.pop("backend", None)  # MuJoCo-only options
    kwargs.pop("nthread", None)
    if env_id not in CUSTOM and env_id.partition(":")[2].isidentifier():
        # `module:factory` (gymnasium's `module:Env-v0` ids, whose env name is no identifier, go on
        # to gymnasium below)
        register(env_id, _import_factory(env_id))
    if env_id in CUSTOM:
        from envs.base import check_env

        kwargs.pop("vectorization_mode", None)
        env = CUSTOM[env_id](num_envs=num_envs, device=device, seed=seed, **kwargs)
        check_env(env, num_envs, device)
        return env
    if env_id in VARIANTS or env_id in EXTERNAL:
        kwargs.pop("vectorization_mode", None)
        return (VARIANTS.get(env_id) or EXTERNAL[env_id])(
            num_envs=num_envs, device=device, seed=seed, **kwargs
        )
    if env_id in NATIVE or env_id in MULTI_AGENT or env_id in MINATAR:
        kwargs.pop("vectorization_mode", None)  # only meaningful for host (gymnasium) sub-envs
        cls = NATIVE.get(env_id) or MULTI_AGENT.get(env_id) or MINATAR[env_id]
        return cls(num_envs=num_envs, device=device, seed=seed, **kwargs)
    if env_id.startswith("ALE/"):  # Atari: ale-py's C++ vector env, preprocessed (envs/atari.py)
        from envs.atari import Atari

        kwargs.pop("vectorization_mode", None)
        return Atari(env_id, num_envs=num_envs, device=device, seed=seed, **kwargs)
    import gymnasium as gym

    if env_id not in gym.registry:
        # phys2d/ and tabular/ are gymnasium's JAX-only functional envs: not offered here
        known = sorted(
            set(NATIVE)
            | set(MINATAR)
            | set(VARIANTS)
            | set(EXTERNAL)
            | set(MULTI_AGENT)
            | set(MUJOCO_ALIASES)
            | set(CUSTOM)
            | {k for k in gym.registry if not k.startswith(("phys2d/", "tabular/"))}
        )
        from envs.gym_adapter import newest_versions

        close = difflib.get_close_matches(env_id, newest_versions(known), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise UserError(
            f"unknown env id {env_id!r}.{hint} Torch-native ids: {', '.join(sorted(NATIVE))}; "
            f"batched MuJoCo: {', '.join(MUJOCO_IDS)} (or {', '.join(MUJOCO_ALIASES)}); "
            f"MinAtar (images): MinAtar/<Game>-v1 (-v0: all 6 actions) or <Game>-MinAtar, for "
            f"{', '.join(g for g in GAMES)}; Atari (images, ale-py): ALE/<Game>-v5; "
            f"multi-agent (MPE): {', '.join(MULTI_AGENT)}; partially observed: "
            f"{', '.join(VARIANTS)}; external simulators: {', '.join(EXTERNAL)}; any id registered "
            f"with gymnasium also works (see gymnasium.pprint_registry()), and a torch vec env of "
            f"your own once added with envs.register(id, factory)."
        )
    from envs.gym_adapter import GymnasiumVecEnv

    return GymnasiumVecEnv(env_id, num_envs=num_envs, device=device, seed=seed, **kwargs)
