"""Atari 2600 games (`ALE/<Game>-v5`, any game ale-py ships) through ale-py's C++ vector env, behind
the vec-env contract, preprocessed as DQN's and CleanRL's Atari files do.

`ale_py.vector_env.AtariVectorEnv` steps the games on its own threads and does the frame work in
C++: 4 frames a step with the last two max-pooled, 84x84 grayscale, 4 frames stacked, up to 30
no-ops at the start of a game, FIRE at the start where the game needs it, 108,000 frames at most a
game. Here, where the game has FIRE, the first action of each new life is FIRE too (CleanRL's
`FireResetEnv` presses it after every lost life): a greedy policy that never serves would otherwise
stand still until the frame limit. On top of that, for learning (both on by default;
`episodic_life=False`, `clip_rewards=False` turn them off):

- a lost life is a termination (`terminated`), though the game goes on: values are not bootstrapped
  across it, and the agent sees its next frame as a new episode would;
- rewards are clipped to their sign.

What is logged and evaluated is the game itself: `info["score"]` holds each step's unclipped
reward and `info["episode_over"]` marks the end of a game (all lives lost, or the frame limit),
which `common.wrappers.EpisodeStatistics` and `common.evaluate.evaluate` read in place of the
reward and the flags: returns are game scores over all lives, as published scores are.
`info["final_obs"]` where a game ended is its last frame; after a lost life, the frame the game goes
on from.

Observations are uint8 `[N, 4, 84, 84]` tensors (the C++ arrays taken without a copy, moved to
`device`). Sticky actions are off (`repeat_action_probability=0.0`, CleanRL's and envpool's choice;
ALE's v5 default is 0.25). A host simulator's state cannot be saved in a checkpoint: a resumed run
starts new games.

    env = envs.make("ALE/Breakout-v5", num_envs=8)   # pip install ale-py (its ROMs included)
"""

from __future__ import annotations

import atexit
from difflib import get_close_matches

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from common.device import canonical
from common.errors import MissingPackage, UserError
from common.vec_env import NormalTensors
from envs.base import check_actions


def ale_id(rom: str) -> str:
    """`space_invaders` -> `ALE/SpaceInvaders-v5` (the id gymnasium registers for an ale-py ROM)."""
    return f"ALE/{rom.title().replace('_', '')}-v5"


def ale_roms() -> list[str]:
    """The ROMs ale-py has (none without it)."""
    try:
        from ale_py.roms import get_all_rom_ids
    except ImportError:
        return []
    return list(get_all_rom_ids())


def ale_rom(env_id: str) -> str | None:
    """`ALE/SpaceInvaders-v5` -> `space_invaders`, the ROM ale-py knows (for a game it does not
    know, the name it would have); None for an id of another form."""
    import re

    m = re.fullmatch(r"ALE/([A-Za-z0-9]+)-v5", env_id)
    if m is None:
        return None
    known = [rom for rom in ale_roms() if ale_id(rom) == env_id]  # TicTacToe3D: tic_tac_toe_3d
    return known[0] if known else re.sub(r"(?<!^)(?=[A-Z])", "_", m.group(1)).lower()


def rom_name(env_id: str) -> str:
    """`ALE/SpaceInvaders-v5` -> `space_invaders` (the ROM ale-py knows)."""
    if (rom := ale_rom(env_id)) is None:
        raise UserError(f"{env_id!r}: Atari ids here are ALE/<Game>-v5, e.g. ALE/Breakout-v5")
    return rom


class Atari(NormalTensors, gym.vector.VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(
        self,
        env_id: str,
        num_envs: int = 1,
        device="cpu",
        seed: int | None = None,
        episodic_life: bool = True,
        clip_rewards: bool = True,
        repeat_action_probability: float = 0.0,
        full_action_space: bool = False,
        num_threads: int = 0,
    ):
        try:
            from ale_py.vector_env import AtariVectorEnv
        except ImportError:
            raise MissingPackage(f"{env_id} needs ale-py: pip install ale-py") from None
        from ale_py.roms import get_all_rom_ids

        game = rom_name(env_id)
        if game not in (roms := get_all_rom_ids()):
            near = [ale_id(g) for g in get_close_matches(game, roms)]
            raise UserError(
                f"{env_id}: ale-py has no game {game!r}"
                + (f"; did you mean {', '.join(near)}?" if near else "")
                + " (all games: ale_py.roms.get_all_rom_ids())"
            )
        self.env = AtariVectorEnv(
            game,
            num_envs,
            autoreset_mode="SameStep",
            # a lost life reported as a termination (whether the game ended: `step`)
            life_loss_info=episodic_life,
            reward_clipping=False,  # here, after the score is kept
            repeat_action_probability=repeat_action_probability,
            full_action_space=full_action_space,
            num_threads=num_threads,
        )
        # let go of the C++ env before the interpreter's teardown (else nanobind reports a leak)
        atexit.register(self.close_extras)
        self.env_id, self.num_envs, self.device = env_id, num_envs, canonical(device)
        self.clip_rewards = clip_rewards
        self.single_observation_space = self.env.single_observation_space
        self.single_action_space = self.env.single_action_space
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.max_episode_steps = None  # the frame limit ends a game as a truncation
        self._seed, self._frame = seed, None
        from ale_py import Action

        action_set = list(self.env.ale.get_action_set())
        self._fire_id = action_set.index(Action.FIRE) if Action.FIRE in action_set else None
        self._lives = self._serve = None  # lives after the last step; who serves next (FIRE)

    def _tensor(self, x: np.ndarray, dtype=None) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(x)).to(self.device, dtype)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        seed = self._seed if seed is None and self._frame is None else seed
        obs, info = self.env.reset(seed=seed)
        self._frame, self._lives = info["episode_frame_number"], info["lives"]
        self._serve = np.zeros(self.num_envs, dtype=bool)
        return self._tensor(obs), {}

    def step(self, actions):
        a = check_actions(actions, self.single_action_space, self.num_envs, self.device)
        a = a.cpu().numpy().astype(np.int64)
        if ((a < 0) | (a >= self.single_action_space.n)).any():
            raise UserError(
                f"{self.env_id}: actions are integers in [0, {self.single_action_space.n}), got "
                f"{a[:8]}"
            )
        if self._serve is not None and self._serve.any():  # a new life starts with FIRE
            a = np.where(self._serve, self._fire_id, a)
        obs, reward, terminated, truncated, info = self.env.step(a)
        # a game that ended was reset in this step: its frame count starts again
        over = info["episode_frame_number"] < self._frame
        self._frame = info["episode_frame_number"]
        if self._fire_id is not None and self._lives is not None:
            self._serve = (info["lives"] < self._lives) & ~over
        self._lives = info["lives"]
        final = np.where(over[:, None, None, None], info["final_obs"], obs) if over.any() else obs
        score = self._tensor(reward, torch.float32)
        flags = terminated | truncated
        out = {
            "score": score,
            "episode_over": self._tensor(over),
            "lives": self._tensor(info["lives"]),
            "final_obs": self._tensor(final),
            "_final_obs": self._tensor(flags),
        }
        return (
            self._tensor(obs),
            score.sign() if self.clip_rewards else score,
            self._tensor(terminated),
            self._tensor(truncated),
            out,
        )

    def state_dict(self) -> dict:
        return {}  # a host simulator's games cannot be saved: a resumed run starts new ones

    def load_state_dict(self, sd: dict) -> None:
        pass

    def close_extras(self, **kwargs):
        if getattr(self, "env", None) is not None:
            self.env.close()
            self.env = None

    def __repr__(self) -> str:
        return f"Atari({self.env_id}, num_envs={self.num_envs}, device={self.device})"
