"""Evaluate a saved agent for N episodes, on our vectorized env or on gymnasium's own env,
optionally recording a video of it:

    python -m tools.evaluate runs/<run>/checkpoint.pt --episodes 10            # our env
    python -m tools.evaluate runs/<run>/checkpoint.pt --gym                    # gymnasium.make(id)
    python -m tools.evaluate runs/<run>/checkpoint.pt --gym --video agent.gif  # + rgb_array video

The checkpoint names the algorithm file that wrote it; that file's `load_policy` rebuilds the
deterministic policy (observation normalization and action rescaling included): `load_policy`
below, from Python.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import tyro

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common.checkpoint import load_checkpoint  # noqa: E402
from common.errors import UserFileNotFoundError  # noqa: E402
from common.evaluate import evaluate  # noqa: E402


def load_algo(name: str):
    """Import `algos/<name>.py` as a module."""
    path = ROOT / "algos" / f"{name}.py"
    if not path.is_file():
        raise UserFileNotFoundError(
            f"the checkpoint names algorithm {name!r} but {path} does not exist"
        )
    return importlib.import_module(f"algos.{name}")


def load_policy(checkpoint: str, device: str = "cpu"):
    """The deterministic policy stored in `checkpoint`, whichever algorithm wrote it."""
    ckpt = load_checkpoint(checkpoint, map_location="cpu")
    return load_algo(ckpt["algo"]).load_policy(checkpoint, device), ckpt


def gym_rollouts(
    policy, env_id: str, episodes: int = 10, seed: int = 0, video: str | None = None, fps: int = 30
) -> dict:
    """Run `policy` in a single `gymnasium.make(env_id)` for `episodes` episodes (seeded seed,
    seed+1, ...).

    With `video`, the first episode is rendered (`rgb_array`) and written as an animated GIF.
    """
    import gymnasium as gym

    import envs

    env_id = envs.mujoco_id(env_id) or env_id  # `Ant` -> gymnasium's `Ant-v5`
    if video and not os.environ.get("DISPLAY"):
        # headless MuJoCo rendering (set MUJOCO_GL=osmesa to override)
        os.environ.setdefault("MUJOCO_GL", "egl")
    env = gym.make(env_id, render_mode="rgb_array" if video else None)
    returns, lengths, frames = [], [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done, total, n = False, 0.0, 0
        while not done:
            if video and ep == 0:
                frames.append(env.render())
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total += float(reward)
            n += 1
            done = terminated or truncated
        returns.append(total)
        lengths.append(n)
    env.close()
    if video:
        write_gif(frames, video, fps)
    r = np.asarray(returns)
    return {
        "eval_return": float(r.mean()),
        "eval_return_std": float(r.std()),
        "eval_length": float(np.mean(lengths)),
        "returns": returns,
    }


def write_gif(frames: list, path: str, fps: int = 30) -> None:
    from PIL import Image

    images = [Image.fromarray(f) for f in frames]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)


@dataclass
class Args:
    checkpoint: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="CHECKPOINT")]
    """path of a checkpoint.pt written by any algorithm file"""
    episodes: int = 10
    """number of evaluation episodes"""
    gym: bool = False
    """evaluate in gymnasium.make(env_id) instead of our vectorized env"""
    video: str | None = None
    """write a GIF of the first episode here (implies --gym: gymnasium renders it)"""
    seed: int = 0
    """seed of the evaluation episodes"""
    device: str = "cpu"
    """device to run the policy on"""


def main(args: Args) -> dict:
    policy, ckpt = load_policy(args.checkpoint, args.device)
    env_id = ckpt["env_id"]
    if args.gym or args.video:
        result = gym_rollouts(policy, env_id, args.episodes, args.seed, args.video)
        where = f"gymnasium.make({env_id!r})"
    else:
        result = evaluate(policy, env_id, args.episodes, seed=args.seed, device=args.device)
        where = f"envs.make({env_id!r})"
    print(
        f"{ckpt['algo']} on {where}: return {result['eval_return']:.1f} +- "
        f"{result['eval_return_std']:.1f} "
        f"over {args.episodes} episodes (length {result['eval_length']:.0f})"
    )
    if args.video:
        print(f"video written to {args.video}")
    print(json.dumps({k: v for k, v in result.items() if k != "returns"}))
    return result


if __name__ == "__main__":
    from common.cli import cli

    main(cli(Args, __doc__))
