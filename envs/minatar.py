"""MinAtar (Young & Tian, 2019), batched in torch: thousands of sub-envs of one game in one call.

MinAtar keeps five Atari games' dynamics on a 10x10 grid with one binary channel per kind of object
(Breakout 4 channels, Asterix 4, Freeway 7, Seaquest 10, SpaceInvaders 6). This is the
`minatar` package's game logic (1.0.15) rewritten on tensors `[N, ...]`: no Python loop over
sub-envs, same-step autoreset, the project's vec-env contract (common/vec_env.py).
tests/test_minatar_parity.py checks it step for step against the package: the same actions and
random draws give the same observations, rewards and terminations, sticky actions and difficulty
ramping included.

    env = envs.make("MinAtar/Breakout-v1", num_envs=4096, device="cuda")
    obs, info = env.reset(seed=0)            # uint8 [4096, 4, 10, 10], 0 or 1
    obs, reward, terminated, truncated, info = env.step(actions)

Ids follow the package's gymnasium registration: `MinAtar/<Game>-v0` takes all 6 actions,
`MinAtar/<Game>-v1` the game's minimal action set; `<Game>-MinAtar` (gymnax's name) is `-v1`.
Options (`envs.make(id, ..., option=...)`): `sticky_action_prob` (0.1, the package's default: with
this probability the previous action repeats, carried across episodes as the package does),
`difficulty_ramping` (True), `max_episode_steps` (10,000, a truncation the package does not have:
a Breakout policy that never misses would play forever; None for none).

Observations are `(C, 10, 10)` channels-first uint8, the package's `(10, 10, C)` bool state
transposed. Randomness: every step draws a fixed set of uniforms per sub-env (`last_uniforms`:
column 0 the sticky draw, then the game's own) and every reset its game's set
(`last_reset_uniforms`); a quantity the package draws as `randint(k)` is `floor(u * k)` in
float32, `rand() < p` is `u < p`.
One deliberate difference: Freeway draws a car's direction as `sign(u - 0.5)`, which is 0 (a car
without a trail channel: the package fails) for u exactly 0.5; here that u gives +1.
"""

from __future__ import annotations

import functools
import math

import gymnasium as gym
import numpy as np
import torch

from envs.base import TorchVecEnv

# the package's full action set, by index: noop, left, up, right, down, fire
NOOP, LEFT, UP, RIGHT, DOWN, FIRE = range(6)


class _Layout:
    """Named integer fields packed in one int64 state row (`TorchVecEnv` keeps `[N, size]`)."""

    def __init__(self, fields: dict[str, tuple[int, ...]]):
        self.fields, off = {}, 0
        for name, shape in fields.items():
            size = math.prod(shape)
            self.fields[name] = (off, size, shape)
            off += size
        self.size = off

    def unpack(self, state: torch.Tensor) -> dict[str, torch.Tensor]:
        n = state.shape[0]
        return {
            k: state[:, o : o + size].reshape(n, *shape)
            for k, (o, size, shape) in self.fields.items()
        }

    def pack(self, s: dict[str, torch.Tensor]) -> torch.Tensor:
        n = next(iter(s.values())).shape[0]
        return torch.cat([s[k].reshape(n, -1).long() for k in self.fields], 1)


class MinAtar(TorchVecEnv):
    """One MinAtar game, batched. Subclasses give the fields of their state, their reset and their
    step (`_reset(n, u)`, `_act(s, a, u)` on the dict of fields) and their picture (`_render`)."""

    game = ""
    channels: tuple[str, ...] = ()
    minimal_action_set: tuple[int, ...] = tuple(range(6))
    fields: dict[str, tuple[int, ...]] = {}
    n_step_uniforms = 0  # the game's uniforms per step (the sticky draw comes on top)
    n_reset_uniforms = 0

    def __init__(
        self,
        num_envs: int = 1,
        device="cpu",
        seed: int | None = None,
        minimal_actions: bool = True,
        sticky_action_prob: float = 0.1,
        difficulty_ramping: bool = True,
        max_episode_steps: int | None = 10_000,
        validate_actions: bool = True,
    ):
        if not 0.0 <= sticky_action_prob <= 1.0:
            raise ValueError(f"sticky_action_prob must be in [0, 1], got {sticky_action_prob}")
        if max_episode_steps is not None and max_episode_steps <= 0:
            raise ValueError(f"max_episode_steps must be positive or None, got {max_episode_steps}")
        self.layout = _Layout(self.fields)
        self.sticky_action_prob = float(sticky_action_prob)
        self.ramping = bool(difficulty_ramping)
        self.max_episode_steps = max_episode_steps
        actions = self.minimal_action_set if minimal_actions else tuple(range(6))
        obs_space = gym.spaces.Box(0, 1, (len(self.channels), 10, 10), np.uint8)
        super().__init__(
            num_envs,
            obs_space,
            gym.spaces.Discrete(len(actions)),
            device,
            torch.long,  # the state: integers (views of it are the games' fields)
            seed,
            validate_actions,
        )
        self.state = self.state.clone()  # not the cached start (`_sample_initial_state`)
        self.action_set = torch.tensor(actions, device=self.device)
        # the package's `last_action`: sticky actions repeat it, across an episode's end too
        self.last_action = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.last_uniforms = self.last_reset_uniforms = None

    # ---- TorchVecEnv's three functions ------------------------------------------------------
    def _uniforms(self, n: int, k: int) -> torch.Tensor:
        """The uniforms [n, k] a step or a reset draws (one place: tests draw them elsewhere)."""
        return torch.rand(n, k, generator=self.rng, device=self.device)

    def _sample_initial_state(self, n: int) -> torch.Tensor:
        u = self._uniforms(n, self.n_reset_uniforms)
        self.last_reset_uniforms = u
        if self.n_reset_uniforms:
            return self.layout.pack(self._reset(n, u))
        # a game that starts the same way every time: its start, built once (read, never written)
        if getattr(self, "_start", None) is None or self._start.shape[0] != n:
            self._start = self.layout.pack(self._reset(n, u))
        return self._start

    def _transition(self, state, action):
        n = state.shape[0]
        u = self._uniforms(n, 1 + self.n_step_uniforms)
        self.last_uniforms = u
        a = self.action_set[action.long()]
        a = torch.where(u[:, 0] < self.sticky_action_prob, self.last_action, a)
        self.last_action.copy_(a)
        s = self.layout.unpack(state)
        reward, terminated = self._act(s, a, u[:, 1:])
        return self.layout.pack(s), reward.float(), terminated

    def _observe_reset(self, final_obs, fresh, done):
        if self.n_reset_uniforms:  # a random start: draw the state as it is now
            return super()._observe_reset(final_obs, fresh, done)
        # a game that starts the same way every time: its start's picture, drawn once
        start = self.__dict__.get("_start_obs")
        if start is None or start.shape[0] != fresh.shape[0]:
            start = self._start_obs = self._observe(fresh)
        # `torch.where(done, start, final_obs)` as arithmetic: exact in uint8 (mod 256), and many
        # times faster on a CPU, whose `where` kernel for bytes is not vectorized (bench/NOTES.md)
        return final_obs + (start - final_obs) * done.view(-1, 1, 1, 1).to(torch.uint8)

    def _observe(self, state):
        s = self.layout.unpack(state)
        img = torch.zeros(
            state.shape[0], len(self.channels) * 100, dtype=torch.uint8, device=self.device
        )
        self._render(s, img)  # counts: two objects may share a cell
        return img.clamp_(max=1).view(-1, len(self.channels), 10, 10)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.last_action.zero_()  # a reset of the whole batch starts afresh (the package keeps it)
        return super().reset(seed=seed, options=options)

    def _table(self, values: tuple) -> torch.Tensor:
        """`values` as a tensor on the device, made once (a copy to a GPU each step would wait)."""
        tables = self.__dict__.setdefault("_tables", {})
        if values not in tables:
            tables[values] = torch.tensor(values, device=self.device)
        return tables[values]

    # ---- for the games ----------------------------------------------------------------------
    def _zeros(self, n, *shape):
        return torch.zeros(n, *shape, dtype=torch.long, device=self.device)

    def _full(self, n, value, *shape):
        return torch.full((n, *shape), value, dtype=torch.long, device=self.device)

    def _ones(self, like):
        """uint8 ones shaped as `like` (an index tensor), made once a shape."""
        ones = self.__dict__.setdefault("_ones_by_shape", {})
        if like.shape not in ones:
            ones[like.shape] = torch.ones(like.shape, dtype=torch.uint8, device=self.device)
        return ones[like.shape]

    def _dot(self, img, channel, y, x, mask=None):
        """Light the cells (y, x) (`[n]` or `[n, K]`) of `channel` where `mask`."""
        c = self.channels.index(channel)
        idx = c * 100 + y.clamp(0, 9) * 10 + x.clamp(0, 9)
        idx = idx if idx.dim() == 2 else idx[:, None]
        on = self._ones(idx) if mask is None else mask.view(idx.shape).to(torch.uint8)
        img.scatter_add_(1, idx, on)

    def _grid(self, img, channel, grid):
        c = self.channels.index(channel)
        img[:, c * 100 : (c + 1) * 100] += grid.reshape(grid.shape[0], 100).to(torch.uint8)

    # ---- checkpointable state: the sticky action too ----------------------------------------
    def state_dict(self) -> dict:
        return {**super().state_dict(), "last_action": self.last_action.clone()}

    def load_state_dict(self, sd: dict) -> None:
        super().load_state_dict(sd)
        self.last_action.copy_(sd["last_action"])


def _randint(u, k):
    """numpy's `randint(k)` for the uniform `u`: floor(u * k), in float32 (`k`: int or tensor)."""
    return torch.floor(u * k).long()


def _step(lr):
    """+1 for an object moving right (`lr`), -1 left."""
    return torch.where(lr > 0, 1, -1)


def _first(match):
    """Index and presence of the first True along the last dim (list order)."""
    return match.long().argmax(-1), match.any(-1)


def _drop(alive, idx, where_):
    """`alive` with the entry `idx` (`[n]`) cleared where `where_`."""
    kill = torch.nn.functional.one_hot(idx, alive.shape[-1]).bool() & where_[:, None]
    return alive & ~kill


class Breakout(MinAtar):
    """A paddle at the bottom, a ball on the diagonals, three rows of bricks (+1 each; they come
    back once all are gone). The episode ends when the ball passes the paddle."""

    game = "breakout"
    channels = ("paddle", "ball", "trail", "brick")
    minimal_action_set = (NOOP, LEFT, RIGHT)
    # bricks: only rows 1-3 ever hold one, so a 30-bit mask, bit (y - 1) * 10 + x: the state is 8
    # integers a sub-env, not 107 (every step copies it; at thousands of sub-envs the copies were
    # most of the step: bench/NOTES.md#learning-from-pixels)
    fields = dict(
        ball_x=(), ball_y=(), ball_dir=(), pos=(), last_x=(), last_y=(), strike=(), bricks=()
    )
    n_reset_uniforms = 1
    _all_bricks = (1 << 30) - 1

    def _reset(self, n, u):
        left = _randint(u[:, 0], 2) == 0  # randint(2): start in the left or the right corner
        bricks = self._full(n, self._all_bricks)
        ball_x = torch.where(left, 0, 9)
        return dict(
            ball_x=ball_x,
            ball_y=self._full(n, 3),
            ball_dir=torch.where(left, 2, 3),
            pos=self._full(n, 4),
            last_x=ball_x,
            last_y=self._full(n, 3),
            strike=self._zeros(n),
            bricks=bricks,
        )

    # ball directions 0..3: up-left, up-right, down-right, down-left
    _dx, _dy = (-1, 1, 1, -1), (-1, -1, 1, 1)
    _flip_x, _flip_y, _flip_paddle = (1, 0, 3, 2), (3, 2, 1, 0), (2, 3, 0, 1)

    def _act(self, s, a, u):
        t = self._table
        pos = torch.where(a == LEFT, (s["pos"] - 1).clamp(min=0), s["pos"])
        pos = torch.where(a == RIGHT, (pos + 1).clamp(max=9), pos)
        last_x, last_y, d = s["ball_x"], s["ball_y"], s["ball_dir"]
        nx, ny = last_x + t(self._dx)[d], last_y + t(self._dy)[d]
        wall = (nx < 0) | (nx > 9)
        nx = nx.clamp(0, 9)
        d = torch.where(wall, t(self._flip_x)[d], d)
        top = ny < 0
        ny = ny.clamp(min=0)
        bit = (ny - 1).clamp(0, 2) * 10 + nx  # the cell's bit, where it is in rows 1-3
        brick = (ny >= 1) & (ny <= 3) & (s["bricks"].bitwise_right_shift(bit) & 1 == 1)
        hit = brick & (s["strike"] == 0)  # one brick per contact: a second one is passed through
        bricks = s["bricks"] & ~hit.long().bitwise_left_shift(bit)
        ny = torch.where(hit, last_y, ny)
        d = torch.where(top | hit, t(self._flip_y)[d], d)
        bottom = ~top & ~brick & (ny == 9)
        bricks = torch.where(bottom & (bricks == 0), self._all_bricks, bricks)  # all gone: refill
        back = bottom & (last_x == pos)  # the ball lands on the paddle's column: straight back
        side = bottom & ~back & (nx == pos)  # on the paddle from the side: back the way it came
        d = torch.where(back, t(self._flip_y)[d], torch.where(side, t(self._flip_paddle)[d], d))
        ny = torch.where(back | side, last_y, ny)
        s.update(
            ball_x=nx,
            ball_y=ny,
            ball_dir=d,
            pos=pos,
            last_x=last_x,
            last_y=last_y,
            strike=brick.long(),
            bricks=bricks,
        )
        return hit.long(), bottom & ~back & ~side

    def _render(self, s, img):
        self._dot(img, "ball", s["ball_y"], s["ball_x"])
        self._dot(img, "paddle", torch.full_like(s["pos"], 9), s["pos"])
        self._dot(img, "trail", s["last_y"], s["last_x"])
        bits = s["bricks"][:, None].bitwise_right_shift(self._table(tuple(range(30)))) & 1
        c = self.channels.index("brick") * 100
        img[:, c + 10 : c + 40] += bits.to(torch.uint8)  # rows 1-3


class Asterix(MinAtar):
    """Move in four directions; enemies and treasure enter each row from the sides: +1 for a
    treasure, the episode ends on touching an enemy. Spawning and moving speed up over time."""

    game = "asterix"
    channels = ("player", "enemy", "trail", "gold")
    minimal_action_set = (NOOP, LEFT, UP, RIGHT, DOWN)
    # 8 entity slots: slot i runs along row i + 1
    fields = dict(
        px=(),
        py=(),
        alive=(8,),
        x=(8,),
        lr=(8,),
        gold=(8,),
        spawn_speed=(),
        spawn_timer=(),
        move_speed=(),
        move_timer=(),
        ramp_timer=(),
        ramp_index=(),
    )
    n_step_uniforms = 3  # spawn: direction, treasure or not, which free row

    def _reset(self, n, u):
        z = self._zeros(n, 8)
        return dict(
            px=self._full(n, 5),
            py=self._full(n, 5),
            alive=z,
            x=z,
            lr=z,
            gold=z,
            spawn_speed=self._full(n, 10),
            spawn_timer=self._full(n, 10),
            move_speed=self._full(n, 5),
            move_timer=self._full(n, 5),
            ramp_timer=self._full(n, 100),
            ramp_index=self._zeros(n),
        )

    def _act(self, s, a, u):
        alive, x, lr, gold = s["alive"] > 0, s["x"], s["lr"], s["gold"]
        rows = torch.arange(1, 9, device=self.device)
        spawn = s["spawn_timer"] == 0
        new_lr, new_gold = (u[:, 0] < 1 / 2).long(), (u[:, 1] < 1 / 3).long()
        free = ~alive
        k = _randint(u[:, 2], free.sum(1))  # randint(len(free rows)): the k-th free row
        chosen = free & (free.cumsum(1) - 1 == k[:, None]) & spawn[:, None]
        alive = alive | chosen
        x = torch.where(chosen, torch.where(new_lr > 0, 0, 9)[:, None], x)
        lr = torch.where(chosen, new_lr[:, None], lr)
        gold = torch.where(chosen, new_gold[:, None], gold)
        spawn_timer = torch.where(spawn, s["spawn_speed"], s["spawn_timer"])
        px = torch.where(a == LEFT, (s["px"] - 1).clamp(min=0), s["px"])
        px = torch.where(a == RIGHT, (px + 1).clamp(max=9), px)
        py = torch.where(a == UP, (s["py"] - 1).clamp(min=1), s["py"])
        py = torch.where(a == DOWN, (py + 1).clamp(max=8), py)
        at = alive & (x == px[:, None]) & (rows == py[:, None])
        reward, terminated = (at & (gold > 0)).sum(1), (at & (gold == 0)).any(1)
        alive = alive & ~(at & (gold > 0))
        move = (s["move_timer"] == 0)[:, None] & alive
        move_timer = torch.where(s["move_timer"] == 0, s["move_speed"], s["move_timer"])
        x = torch.where(move, x + _step(lr), x)
        alive = alive & ~(move & ((x < 0) | (x > 9)))
        at = move & alive & (x == px[:, None]) & (rows == py[:, None])
        reward = reward + (at & (gold > 0)).sum(1)
        terminated = terminated | (at & (gold == 0)).any(1)
        alive = alive & ~(at & (gold > 0))
        # difficulty: every 100 steps, spawn one step sooner and (every other time) move faster
        spawn_speed, move_speed, ramp_index = s["spawn_speed"], s["move_speed"], s["ramp_index"]
        ramp = self.ramping & ((spawn_speed > 1) | (move_speed > 1))
        tick = ramp & (s["ramp_timer"] >= 0)
        up = ramp & ~tick
        ramp_timer = torch.where(tick, s["ramp_timer"] - 1, torch.where(up, 100, s["ramp_timer"]))
        move_speed = move_speed - (up & (move_speed > 1) & (ramp_index % 2 == 1)).long()
        spawn_speed = spawn_speed - (up & (spawn_speed > 1)).long()
        s.update(
            px=px,
            py=py,
            alive=alive.long(),
            x=x.clamp(-1, 10),
            lr=lr,
            gold=gold,
            spawn_speed=spawn_speed,
            spawn_timer=spawn_timer - 1,
            move_speed=move_speed,
            move_timer=move_timer - 1,
            ramp_timer=ramp_timer,
            ramp_index=ramp_index + up.long(),
        )
        return reward, terminated

    def _render(self, s, img):
        alive, x, lr, gold = s["alive"] > 0, s["x"], s["lr"], s["gold"] > 0
        rows = torch.arange(1, 9, device=self.device).expand_as(x)
        self._dot(img, "player", s["py"], s["px"])
        self._dot(img, "gold", rows, x, alive & gold)
        self._dot(img, "enemy", rows, x, alive & ~gold)
        back = x - _step(lr)
        self._dot(img, "trail", rows, back, alive & (back >= 0) & (back <= 9))


class Freeway(MinAtar):
    """Cross ten lanes of traffic from the bottom to the top (+1, then back to the bottom, and the
    cars' speeds are drawn anew); a car sends the chicken back to the bottom. 2,500 steps."""

    game = "freeway"
    channels = ("chicken", "car", "speed1", "speed2", "speed3", "speed4", "speed5")
    minimal_action_set = (NOOP, UP, DOWN)
    # car i runs along row i + 1; speed: +-(1..5), the car moves once every |speed| + 1 steps
    fields = dict(pos=(), move_timer=(), time_left=(), car_x=(8,), car_timer=(8,), car_speed=(8,))
    n_step_uniforms = n_reset_uniforms = 16  # 8 speeds (randint(1, 6, 8)), 8 directions (rand(8))

    def _speeds(self, u):
        speed = 1 + _randint(u[:, :8], 5)
        return torch.where(u[:, 8:] < 0.5, -speed, speed)  # sign(u - 0.5); u == 0.5: +1 here

    def _reset(self, n, u):
        speed = self._speeds(u)
        return dict(
            pos=self._full(n, 9),
            move_timer=self._full(n, 3),
            time_left=self._full(n, 2500),
            car_x=self._zeros(n, 8),
            car_timer=speed.abs(),
            car_speed=speed,
        )

    def _act(self, s, a, u):
        pos, move_timer = s["pos"], s["move_timer"]
        ready = move_timer == 0
        up, down = (a == UP) & ready, (a == DOWN) & ready
        move_timer = torch.where(up | down, 3, move_timer)
        pos = torch.where(
            up, (pos - 1).clamp(min=0), torch.where(down, (pos + 1).clamp(max=9), pos)
        )
        win = pos == 0
        new = self._speeds(u)
        speed = torch.where(win[:, None], new, s["car_speed"])
        timer = torch.where(win[:, None], new.abs(), s["car_timer"])
        pos = torch.where(win, 9, pos)
        # the cars; only the one in the chicken's row can hit it (before or after moving)
        x = s["car_x"]
        mine = torch.arange(1, 9, device=self.device) == pos[:, None]
        moves = timer == 0
        moved = torch.where(moves, (x + _step(speed)) % 10, x)
        hit = mine & ((x == 4) | (moves & (moved == 4)))
        timer = torch.where(moves, speed.abs(), timer - 1)
        pos = torch.where(hit.any(1), 9, pos)
        time_left = s["time_left"] - 1
        s.update(
            pos=pos,
            move_timer=move_timer - (move_timer > 0).long(),
            time_left=time_left,
            car_x=moved,
            car_timer=timer,
            car_speed=speed,
        )
        return win.long(), time_left < 0

    def _render(self, s, img):
        x, speed = s["car_x"], s["car_speed"]
        rows = torch.arange(1, 9, device=self.device).expand_as(x)
        self._dot(img, "chicken", s["pos"], torch.full_like(s["pos"], 4))
        self._dot(img, "car", rows, x)
        back = (x - _step(speed)) % 10
        # the trail's channel tells the speed: speed1..speed5, one scatter for the five
        channel = self.channels.index("speed1") - 1 + speed.abs()
        img.scatter_add_(1, channel * 100 + rows * 10 + back, self._ones(x))


class SpaceInvaders(MinAtar):
    """A cannon under a block of aliens that marches sideways and down and fires back: +1 per
    alien shot; a new, faster wave when one is cleared. The episode ends when the cannon is hit."""

    game = "space_invaders"
    channels = ("cannon", "alien", "alien_left", "alien_right", "friendly_bullet", "enemy_bullet")
    minimal_action_set = (NOOP, LEFT, RIGHT, FIRE)
    # the three 10x10 grids as ten row masks each (bit x of row y: the cell (y, x)), so the state is
    # 37 integers a sub-env, not 307: every step packs, selects and copies it, and at thousands of
    # sub-envs those copies were most of the step (bench/NOTES.md#learning-from-pixels)
    fields = dict(
        pos=(),
        bullets=(10,),
        enemy_bullets=(10,),
        aliens=(10,),
        alien_dir=(),
        move_interval=(),
        move_timer=(),
        shot_timer=(),
        ramp_index=(),
        cooldown=(),
    )
    _wave_rows = (0b11111100,) * 4 + (0,) * 6  # rows 0-3, columns 2-7

    def _reset(self, n, u):
        z = self._zeros(n, 10)
        return dict(
            pos=self._full(n, 5),
            bullets=z,
            enemy_bullets=z,
            aliens=self._table(self._wave_rows).expand(n, 10),
            alien_dir=self._full(n, -1),
            move_interval=self._full(n, 12),
            move_timer=self._full(n, 12),
            shot_timer=self._full(n, 10),
            ramp_index=self._zeros(n),
            cooldown=self._zeros(n),
        )

    def _masks(self):
        """The tables the row masks need, made once: each mask's cells `[1024, 10]` (uint8) and
        its number of cells `[1024]`."""
        if "_cells" not in self.__dict__:
            cols = torch.arange(10, device=self.device)
            self._cells = (torch.arange(1024, device=self.device)[:, None] >> cols & 1).byte()
            self._count = self._cells.sum(1)
        return self._cells, self._count

    def _act(self, s, a, u):
        n = a.shape[0]
        cells, count_of = self._masks()
        pos, cooldown = s["pos"], s["cooldown"]
        fire = (a == FIRE) & (cooldown == 0)
        fired = (fire.long() << pos)[:, None]  # a new bullet in row 9, under the cannon (a mask)
        cooldown = torch.where(fire, 5, cooldown)
        pos = torch.where(~fire & (a == LEFT), (pos - 1).clamp(min=0), pos)
        pos = torch.where(~fire & (a == RIGHT), (pos + 1).clamp(max=9), pos)
        zero_row = self._zeros(n, 1)
        # the new bullet joins row 9; then ours fly up, theirs down
        bullets = torch.cat([s["bullets"][:, 1:9], s["bullets"][:, 9:] | fired, zero_row], 1)
        enemy = torch.cat([zero_row, s["enemy_bullets"][:, :-1]], 1)
        aliens, d = s["aliens"], s["alien_dir"]
        at_pos = 1 << pos  # the cannon's column (where it is now) as a row mask
        terminated = (enemy[:, 9] & at_pos != 0) | (aliens[:, 9] & at_pos != 0)
        move = s["move_timer"] == 0
        count = count_of[aliens].sum(1)
        move_timer = torch.where(move, torch.minimum(count, s["move_interval"]), s["move_timer"])
        edge = ((aliens & 1).any(1) & (d < 0)) | ((aliens & 512).any(1) & (d > 0))
        turn = move & edge
        terminated = terminated | (turn & (aliens[:, 9] != 0))
        d = torch.where(turn, -d, d)
        right = (aliens << 1 & 1023) | (aliens >> 9)  # each row rotated a column right
        left = (aliens >> 1) | (aliens & 1) << 9
        side = torch.where((d > 0)[:, None], right, left)
        aliens = torch.where(
            turn[:, None], aliens.roll(1, 1), torch.where(move[:, None], side, aliens)
        )
        terminated = terminated | (aliens[:, 9] & at_pos != 0)
        # the alien nearest the cannon (nearest column, lowest alien in it) fires
        shoot = s["shot_timer"] == 0
        cols = torch.arange(10, device=self.device)
        union = functools.reduce(torch.bitwise_or, aliens.unbind(1))  # the occupied columns
        occupied = (union[:, None] >> cols & 1) == 1
        key = ((cols - pos[:, None]).abs() * 10 + cols).masked_fill(~occupied, 1000)
        col = key.argmin(1)
        row = ((aliens >> col[:, None] & 1) * torch.arange(1, 11, device=self.device)).argmax(1)
        shoot = shoot & (union != 0)
        enemy.scatter_(
            1, row[:, None], enemy.gather(1, row[:, None]) | (shoot.long() << col)[:, None]
        )
        kill = aliens & bullets
        reward = count_of[kill].sum(1)
        aliens, bullets = aliens & ~kill, bullets & ~kill
        cleared = (aliens == 0).all(1)
        faster = cleared & (s["move_interval"] > 6) & self.ramping
        aliens = torch.where(cleared[:, None], self._table(self._wave_rows), aliens)
        s.update(
            pos=pos,
            bullets=bullets,
            enemy_bullets=enemy,
            aliens=aliens,
            alien_dir=d,
            move_interval=s["move_interval"] - faster.long(),
            move_timer=move_timer - 1,
            shot_timer=torch.where(shoot, 10, s["shot_timer"]) - 1,
            ramp_index=s["ramp_index"] + faster.long(),
            cooldown=cooldown - (cooldown > 0).long(),
        )
        return reward, terminated

    def _render(self, s, img):
        cells = self._masks()[0]
        self._dot(img, "cannon", torch.full_like(s["pos"], 9), s["pos"])
        aliens = cells[s["aliens"]]
        self._grid(img, "alien", aliens)
        left = (s["alien_dir"] < 0)[:, None, None]
        self._grid(img, "alien_left", aliens * left)
        self._grid(img, "alien_right", aliens * ~left)
        self._grid(img, "friendly_bullet", cells[s["bullets"]])
        self._grid(img, "enemy_bullet", cells[s["enemy_bullets"]])


# Seaquest's objects are lists in the package, whose order decides which of two objects in one
# cell a bullet hits; here each list is `[N, K, fields]` kept compact (live entries first, in list
# order): entry k is the package's list[k]. K bounds each list; the package's lists never grow past
# these under its own timers (see `Seaquest._capacity`).
_ALIVE, _X, _Y, _LR, _TIMER, _SHOT = range(6)


def _compact(lst):
    """Live entries first, in their order."""
    k = lst.shape[1]
    key = (lst[..., _ALIVE] == 0).long() * k + torch.arange(k, device=lst.device)
    return lst.gather(1, key.argsort(1)[..., None].expand_as(lst))


def _append(lst, add, rows):
    """`lst` with `rows[:, m]` appended where `add[:, m]`, in the order m = 0, 1, ... (`lst`
    compact; entries past its capacity are dropped)."""
    n, k, f = lst.shape
    count = (lst[..., _ALIVE] > 0).sum(1)
    at = count[:, None] + add.long().cumsum(1) - 1  # [n, M]: the slot of each added row
    at = torch.where(add & (at < k), at, k)  # slot k: a spare one, dropped
    out = torch.cat([lst, lst.new_zeros(n, 1, f)], 1)
    out.scatter_(1, at[..., None].expand(-1, -1, f), rows.expand(n, at.shape[1], f))
    return out[:, :k]


def _hits(check, x, y, targets):
    """Which of `check` (`[n, M]`, at cells (x, y), visited as the package's loop does: the list
    backwards) each take one live target (`[n, T, fields]`) in its cell, the first one in list order
    that is left: the j-th visitor of a cell takes the j-th target there. -> (hit [n, M], taken
    [n, T])."""
    n, m = check.shape
    idx = torch.arange(m, device=x.device)
    cell = torch.where(check, y * 10 + x, 100)  # 100: not visiting
    # each visitor's rank among its cell's visitors: sort by cell, then backwards through the list
    key, order = (cell * m + (m - 1 - idx)).sort(1)
    key = torch.div(key, m, rounding_mode="floor")
    start = torch.ones_like(check)
    start[:, 1:] = key[:, 1:] != key[:, :-1]
    first = torch.where(start, idx, 0).cummax(1).values
    rank = torch.empty_like(order).scatter_(1, order, (idx - first).expand(n, m))
    live = targets[..., _ALIVE] > 0
    tcell = targets[..., _Y] * 10 + targets[..., _X]
    there = check[:, :, None] & live[:, None, :] & (cell[:, :, None] == tcell[:, None, :])
    got = there & (there.long().cumsum(2) - 1 == rank[:, :, None])  # [n, M, T]
    return got.any(2), got.any(1)


class Seaquest(MinAtar):
    """A submarine shoots fish and enemy subs (+1 each) and rescues divers; its oxygen runs out
    unless it surfaces with a diver aboard (surfacing with six pays the oxygen left). The episode
    ends on a hit, on running out of oxygen, or on surfacing with no diver. Each surfacing speeds
    the enemies up."""

    game = "seaquest"
    channels = (
        "sub_front",
        "sub_back",
        "friendly_bullet",
        "trail",
        "enemy_bullet",
        "enemy_fish",
        "enemy_sub",
        "oxygen_guage",
        "diver_guage",
        "diver",
    )
    minimal_action_set = tuple(range(6))
    # capacities: one bullet of ours per 5 steps living <= 10 steps; one diver per 30 steps living
    # <= 60; at most one enemy a step (fastest spawning) living <= 30 steps (fastest moving); a sub
    # fires once per 11 steps and its bullet lives <= 10 steps
    _capacity = dict(bullets=4, divers=4, fish=32, subs=32, enemy_bullets=32)
    fields = dict(
        oxygen=(),
        divers_aboard=(),
        sub_x=(),
        sub_y=(),
        sub_or=(),
        spawn_speed=(),
        spawn_timer=(),
        diver_timer=(),
        move_speed=(),
        ramp_index=(),
        cooldown=(),
        surfaced=(),
        bullets=(4, 4),
        enemy_bullets=(32, 4),
        fish=(32, 5),
        subs=(32, 6),
        divers=(4, 5),
    )
    n_step_uniforms = 5  # enemy: direction, sub or fish, row; diver: direction, row

    def _reset(self, n, u):
        s = dict(
            oxygen=self._full(n, 200),
            divers_aboard=self._zeros(n),
            sub_x=self._full(n, 5),
            sub_y=self._zeros(n),
            sub_or=self._zeros(n),
            spawn_speed=self._full(n, 20),
            spawn_timer=self._full(n, 20),
            diver_timer=self._full(n, 30),
            move_speed=self._full(n, 5),
            ramp_index=self._zeros(n),
            cooldown=self._zeros(n),
            surfaced=self._full(n, 1),
        )
        for name, shape in self.fields.items():
            if len(shape) == 2:
                s[name] = self._zeros(n, *shape)
        return s

    def _act(self, s, a, u):
        n = a.shape[0]
        one = self._full(n, 1)
        reward, terminated = self._zeros(n), torch.zeros(n, dtype=torch.bool, device=self.device)
        fish, subs, divers = s["fish"], s["subs"], s["divers"]
        bullets, enemy_bullets = s["bullets"], s["enemy_bullets"]
        move_speed = s["move_speed"]
        # an enemy enters a random row from a random side, unless that row has one going the
        # other way
        spawn = s["spawn_timer"] == 0
        lr, is_sub, y = (u[:, 0] < 1 / 2).long(), u[:, 1] < 1 / 3, 1 + _randint(u[:, 2], 8)
        x = torch.where(lr > 0, 0, 9)
        enemies = torch.cat([subs[..., :4], fish[..., :4]], 1)
        clash = (
            (enemies[..., _ALIVE] > 0)
            & (enemies[..., _Y] == y[:, None])
            & (enemies[..., _LR] != lr[:, None])
        ).any(1)
        ok = spawn & ~clash
        ten = self._full(n, 10)
        subs = _append(
            subs, (ok & is_sub)[:, None], torch.stack([one, x, y, lr, move_speed, ten], 1)[:, None]
        )
        fish = _append(
            fish, (ok & ~is_sub)[:, None], torch.stack([one, x, y, lr, move_speed], 1)[:, None]
        )
        spawn_timer = torch.where(spawn, s["spawn_speed"], s["spawn_timer"])
        diver = s["diver_timer"] == 0
        lr, y = (u[:, 3] < 1 / 2).long(), 1 + _randint(u[:, 4], 8)
        x, five = torch.where(lr > 0, 0, 9), self._full(n, 5)
        divers = _append(divers, diver[:, None], torch.stack([one, x, y, lr, five], 1)[:, None])
        diver_timer = torch.where(diver, 30, s["diver_timer"])
        # the player
        sx, sy, orient, cooldown = s["sub_x"], s["sub_y"], s["sub_or"], s["cooldown"]
        fire = (a == FIRE) & (cooldown == 0)
        bullets = _append(bullets, fire[:, None], torch.stack([one, sx, sy, orient], 1)[:, None])
        cooldown = torch.where(fire, 5, cooldown)
        left, right = ~fire & (a == LEFT), ~fire & (a == RIGHT)
        sx = torch.where(left, (sx - 1).clamp(min=0), torch.where(right, (sx + 1).clamp(max=9), sx))
        orient = torch.where(left, 0, torch.where(right, 1, orient))
        sy = torch.where(~fire & (a == UP), (sy - 1).clamp(min=0), sy)
        sy = torch.where(~fire & (a == DOWN), (sy + 1).clamp(max=8), sy)
        # our bullets, the list backwards: each hits the first fish in its new cell, else the
        # first sub there
        bullets = bullets.clone()
        for k in reversed(range(bullets.shape[1])):
            b = bullets[:, k]
            bx, by = b[:, _X] + _step(b[:, _LR]), b[:, _Y]
            flying = (b[:, _ALIVE] > 0) & (bx >= 0) & (bx <= 9)
            idx, there = _first(self._in_cell(fish, bx, by))
            hit_fish = flying & there
            fish[..., _ALIVE] = _drop(fish[..., _ALIVE] > 0, idx, hit_fish).long()
            idx, there = _first(self._in_cell(subs, bx, by))
            hit_sub = flying & ~hit_fish & there
            subs[..., _ALIVE] = _drop(subs[..., _ALIVE] > 0, idx, hit_sub).long()
            alive = (flying & ~hit_fish & ~hit_sub).long()
            bullets[:, k] = torch.stack([alive, bx, by, b[:, _LR]], 1)
            reward = reward + (hit_fish | hit_sub).long()
        # divers, backwards: picked up (at most 6 aboard) where the sub is, before or after moving
        count = s["divers_aboard"]
        for k in reversed(range(divers.shape[1])):
            d = divers[:, k]
            live = d[:, _ALIVE] > 0
            room = count < 6
            here = live & (d[:, _X] == sx) & (d[:, _Y] == sy) & room
            moves = live & ~here & (d[:, _TIMER] == 0)
            dx = torch.where(moves, d[:, _X] + _step(d[:, _LR]), d[:, _X])
            out = moves & ((dx < 0) | (dx > 9))
            caught = moves & ~out & (dx == sx) & (d[:, _Y] == sy) & room
            timer = torch.where(moves, 5, torch.where(live & ~here, d[:, _TIMER] - 1, d[:, _TIMER]))
            count = count + (here | caught).long()
            d = torch.stack(
                [(live & ~here & ~out & ~caught).long(), dx, d[:, _Y], d[:, _LR], timer], 1
            )
            divers = divers.clone()
            divers[:, k] = d
        # enemy subs, backwards: move, ram, get shot, fire (a sub fires even as it leaves or dies)
        subs, bullets, enemy_bullets, r, t = self._enemies(
            subs, bullets, move_speed, sx, sy, enemy_bullets
        )
        reward, terminated = reward + r, terminated | t
        # enemy bullets
        live = enemy_bullets[..., _ALIVE] > 0
        at = lambda ex, ey: (ex == sx[:, None]) & (ey == sy[:, None])
        terminated = terminated | (live & at(enemy_bullets[..., _X], enemy_bullets[..., _Y])).any(1)
        ex = enemy_bullets[..., _X] + _step(enemy_bullets[..., _LR])
        live = live & (ex >= 0) & (ex <= 9)
        terminated = terminated | (live & at(ex, enemy_bullets[..., _Y])).any(1)
        enemy_bullets = torch.cat(
            [live.long()[..., None], ex[..., None], enemy_bullets[..., 2:]], 2
        )
        # fish, backwards
        fish, bullets, _, r, t = self._enemies(fish, bullets, move_speed, sx, sy, None)
        reward, terminated = reward + r, terminated | t
        # timers, oxygen, surfacing
        oxygen, surfaced, ramp_index = s["oxygen"], s["surfaced"] > 0, s["ramp_index"]
        spawn_speed = s["spawn_speed"]
        terminated = terminated | (oxygen <= 0)
        below = sy > 0
        oxygen = torch.where(below, oxygen - 1, oxygen)
        arrive = ~below & ~surfaced
        terminated = terminated | (arrive & (count == 0))
        up = arrive & (count != 0)
        full = up & (count == 6)
        reward = reward + torch.where(full, torch.div(oxygen * 10, 200, rounding_mode="floor"), 0)
        count = torch.where(full, 0, count) - up.long()  # six aboard: all leave (count ends at -1)
        oxygen = torch.where(up, 200, oxygen)
        ramp = up & self.ramping & ((spawn_speed > 1) | (move_speed > 2))
        move_speed = move_speed - (ramp & (move_speed > 2) & (ramp_index % 2 == 1)).long()
        spawn_speed = spawn_speed - (ramp & (spawn_speed > 1)).long()
        surfaced = (surfaced & ~below) | up
        dec = lambda v: v - (v > 0).long()
        s.update(
            oxygen=oxygen,
            divers_aboard=count,
            sub_x=sx,
            sub_y=sy,
            sub_or=orient,
            spawn_speed=spawn_speed,
            spawn_timer=dec(spawn_timer),
            diver_timer=dec(diver_timer),
            move_speed=move_speed,
            ramp_index=ramp_index + ramp.long(),
            cooldown=dec(cooldown),
            surfaced=surfaced.long(),
            bullets=_compact(bullets),
            enemy_bullets=_compact(enemy_bullets),
            fish=_compact(fish),
            subs=_compact(subs),
            divers=_compact(divers),
        )
        return reward, terminated

    @staticmethod
    def _in_cell(lst, x, y):
        return (lst[..., _ALIVE] > 0) & (lst[..., _X] == x[:, None]) & (lst[..., _Y] == y[:, None])

    def _enemies(self, lst, bullets, move_speed, sx, sy, enemy_bullets):
        """The package's loop over its fish or sub list, backwards, on all entries at once."""
        live = lst[..., _ALIVE] > 0
        ex, ey = lst[..., _X], lst[..., _Y]
        at = lambda x: (x == sx[:, None]) & (ey == sy[:, None])
        terminated = (live & at(ex)).any(1)
        moves = live & (lst[..., _TIMER] == 0)
        timer = torch.where(
            moves, move_speed[:, None], torch.where(live, lst[..., _TIMER] - 1, lst[..., _TIMER])
        )
        ex = torch.where(moves, ex + _step(lst[..., _LR]), ex)
        out = moves & ((ex < 0) | (ex > 9))
        ram = moves & ~out & at(ex)
        terminated = terminated | ram.any(1)
        check = moves & ~out & ~ram
        # visited backwards: flip so that the visiting order is 0, 1, ...
        hit, taken = _hits(check, ex, ey, bullets)
        bullets = bullets.clone()
        bullets[..., _ALIVE] = bullets[..., _ALIVE] * ~taken
        alive = live & ~out & ~hit
        cols = [alive.long(), ex.clamp(-1, 10), ey, lst[..., _LR], timer]
        if enemy_bullets is not None:  # subs fire every 11th step
            shot = lst[..., _SHOT]
            fires = live & (shot == 0)
            cols.append(torch.where(fires, 10, torch.where(live, shot - 1, shot)))
            rows = torch.stack([torch.ones_like(ex), ex, ey, lst[..., _LR]], 2)
            enemy_bullets = _append(enemy_bullets, fires.flip(1), rows.flip(1))
        return torch.stack(cols, 2), bullets, enemy_bullets, hit.sum(1), terminated

    def _render(self, s, img):
        sx, sy = s["sub_x"], s["sub_y"]
        self._dot(img, "sub_front", sy, sx)
        self._dot(img, "sub_back", sy, torch.where(s["sub_or"] > 0, sx - 1, sx + 1))
        cols = torch.arange(10, device=self.device)
        bar = torch.div(s["oxygen"].clamp(min=0) * 10, 200, rounding_mode="floor")
        row9 = torch.full((sx.shape[0], 10), 9, device=self.device)
        self._dot(img, "oxygen_guage", row9, cols.expand_as(row9), cols < bar[:, None])
        aboard = (cols >= 9 - s["divers_aboard"][:, None]) & (cols < 9)
        self._dot(img, "diver_guage", row9, cols.expand_as(row9), aboard)
        for name, channel in (("bullets", "friendly_bullet"), ("enemy_bullets", "enemy_bullet")):
            lst = s[name]
            self._dot(img, channel, lst[..., _Y], lst[..., _X], lst[..., _ALIVE] > 0)
        for name, channel in (("fish", "enemy_fish"), ("subs", "enemy_sub"), ("divers", "diver")):
            lst = s[name]
            live = lst[..., _ALIVE] > 0
            self._dot(img, channel, lst[..., _Y], lst[..., _X], live)
            back = lst[..., _X] - _step(lst[..., _LR])
            self._dot(img, "trail", lst[..., _Y], back, live & (back >= 0) & (back <= 9))


GAMES = {
    "Asterix": Asterix,
    "Breakout": Breakout,
    "Freeway": Freeway,
    "Seaquest": Seaquest,
    "SpaceInvaders": SpaceInvaders,
}


def factory(game: str, minimal_actions: bool):
    cls = GAMES[game]

    def make(num_envs=1, device="cpu", seed=None, **kwargs):
        return cls(
            num_envs=num_envs, device=device, seed=seed, minimal_actions=minimal_actions, **kwargs
        )

    return make


# `MinAtar/<Game>-v0` (6 actions), `-v1` (minimal set), `<Game>-MinAtar` (gymnax's name for -v1)
IDS = {
    **{f"MinAtar/{g}-v0": factory(g, False) for g in GAMES},
    **{f"MinAtar/{g}-v1": factory(g, True) for g in GAMES},
    **{f"{g}-MinAtar": factory(g, True) for g in GAMES},
}
