"""Unitree Go2 learning to walk in Genesis (`pip install genesis-world`), an external GPU-ready
simulator brought in through rsl_rl's `VecEnv` interface and `envs.from_rsl_rl.FromRslRl`, as an
IsaacLab, mjlab or Genesis task written for rsl_rl would come in.

    python algos/ppo_vec.py --env GenesisGo2-v0 --num-envs 64        # Genesis's CPU backend here
    env = envs.make("GenesisGo2-v0", num_envs=4096, device="cuda")    # its GPU backend on a GPU

`Go2Walk` is the simulator side, written against Genesis's public API and rsl_rl's interface only
(it knows nothing of this library); `make_go2` is the `envs.make` factory that wraps it. The task, a
common legged-locomotion recipe (our own constants):

* the robot: Genesis's bundled Go2 URDF on a plane; 12 leg joints under PD position control
  (kp 20, kd 0.5) around a standing pose, action in [-2, 2] = joint offsets x 0.25, 50 Hz control
  (dt 0.02, 2 substeps).
* command: walk forward at 0.5 m/s (fixed). Reward per step (x dt): 1.0 exp(-|v_xy - cmd|^2 / 0.25)
  + 0.2 exp(-w_z^2 / 0.25) - 1.0 v_z^2 - 0.005 |a_t - a_{t-1}|^2 - 50 (z - 0.3)^2
  - 0.05 |q - q_default|_1.
* episodes end on a fall (roll or pitch over 0.5 rad, or the base below 0.18 m) or after
  1000 steps (20 s, a time-out).
* observation groups: `policy` (45) = base angular velocity x 0.25, projected gravity, command,
  joint positions - default, joint velocities x 0.05, last action; `critic` (48) = the same plus the
  base linear velocity x 2 (which a robot's IMU does not measure: privileged, for the asymmetric
  critic).
"""

from __future__ import annotations

import torch

from common.device import canonical
from common.errors import MissingPackage

try:
    import genesis as gs
except ImportError as e:  # pragma: no cover - depends on the environment
    raise MissingPackage(f"GenesisGo2-v0 needs Genesis ({e}): pip install genesis-world") from None

LEGS = ("FR", "FL", "RR", "RL")
JOINTS = [f"{leg}_{part}_joint" for leg in LEGS for part in ("hip", "thigh", "calf")]
STAND = {"hip": 0.0, "thigh": 0.8, "calf": -1.5}
REAR_THIGH = 1.0
DT, SUBSTEPS, MAX_STEPS = 0.02, 2, 1000
KP, KD, ACTION_SCALE = 20.0, 0.5, 0.25
ACTION_LIMIT = 2.0  # |action| <= 2: joint offsets within 0.5 rad of the standing pose
COMMAND = (0.5, 0.0, 0.0)
BASE_INIT = (0.0, 0.0, 0.42)


def _init(device: torch.device) -> None:
    if not getattr(gs, "_initialized", False):
        gs.init(
            backend=gs.gpu if device.type == "cuda" else gs.cpu,
            precision="32",
            logging_level="warning",
        )


def _rotate_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """v [N, 3] expressed in the frame of unit quaternions q [N, 4] (w, x, y, z)."""
    w, xyz = q[:, :1], q[:, 1:]
    t = 2.0 * torch.cross(xyz, v, dim=-1)
    return v - w * t + torch.cross(xyz, t, dim=-1)


class Go2Walk:
    """Go2 walking in Genesis, with rsl_rl's `VecEnv` interface (`get_observations`, `step`,
    groups)."""

    def __init__(self, num_envs: int, device="cpu", seed: int | None = None):
        self.device = canonical(device)
        _init(self.device)
        self.num_envs, self.num_actions, self.max_episode_length = num_envs, len(JOINTS), MAX_STEPS
        self.gen = torch.Generator(device=self.device).manual_seed(0 if seed is None else seed)
        self.scene = gs.Scene(
            sim_options=gs.options.SimOptions(dt=DT, substeps=SUBSTEPS),
            rigid_options=gs.options.RigidOptions(
                enable_self_collision=False, constraint_solver=gs.constraint_solver.Newton
            ),
            show_viewer=False,
        )
        self.scene.add_entity(gs.morphs.URDF(file="urdf/plane/plane.urdf", fixed=True))
        self.robot = self.scene.add_entity(
            gs.morphs.URDF(file="urdf/go2/urdf/go2.urdf", pos=BASE_INIT)
        )
        self.scene.build(n_envs=num_envs)
        self.dofs = [self.robot.get_joint(name).dofs_idx_local[0] for name in JOINTS]
        self.robot.set_dofs_kp([KP] * 12, self.dofs)
        self.robot.set_dofs_kv([KD] * 12, self.dofs)
        f = lambda *a: torch.tensor(a, dtype=torch.float32, device=self.device)  # noqa: E731
        self.q_default = f(
            *[
                REAR_THIGH if j.startswith("R") and "thigh" in j else STAND[j.split("_")[1]]
                for j in JOINTS
            ]
        )
        self.command, self.base_init, self.gravity = f(*COMMAND), f(*BASE_INIT), f(0.0, 0.0, -1.0)
        self.unit_quat = f(1.0, 0.0, 0.0, 0.0)
        n = num_envs
        self.episode_length_buf = torch.zeros(n, dtype=torch.long, device=self.device)
        self.actions = torch.zeros(n, 12, device=self.device)
        self.last_actions = torch.zeros(n, 12, device=self.device)
        self._reset(torch.arange(n, device=self.device))
        self._observe()

    # ---- rsl_rl's VecEnv -------------------------------------------------------------------------
    def get_observations(self) -> dict:
        return {"policy": self.obs, "critic": self.critic_obs}

    def reset(self) -> dict:
        self._reset(torch.arange(self.num_envs, device=self.device))
        self._observe()
        return self.get_observations()

    def step(self, actions: torch.Tensor):
        self.actions = actions.to(self.device, torch.float32).clamp(-100.0, 100.0)
        self.robot.control_dofs_position(self.q_default + ACTION_SCALE * self.actions, self.dofs)
        self.scene.step()
        self.episode_length_buf += 1
        self._read_state()
        reward = self._reward()
        fell = (self.roll_pitch.abs() > 0.5).any(-1) | (self.base_pos[:, 2] < 0.18)
        time_out = self.episode_length_buf >= MAX_STEPS
        done = fell | time_out
        self.last_actions = self.actions.clone()
        idx = done.nonzero().flatten()
        if len(idx):  # a host read: Genesis resets by index (a few per step)
            self._reset(idx)
        self._observe()
        return self.get_observations(), reward, done.long(), {"time_outs": time_out & ~fell}

    # ---- internals -------------------------------------------------------------------------------
    def _reset(self, idx: torch.Tensor) -> None:
        k = len(idx)
        noise = 0.1 * (2 * torch.rand(k, 12, generator=self.gen, device=self.device) - 1)
        self.robot.set_dofs_position(
            self.q_default + noise, self.dofs, envs_idx=idx, zero_velocity=True
        )
        self.robot.set_pos(self.base_init.expand(k, 3), envs_idx=idx, zero_velocity=True)
        self.robot.set_quat(self.unit_quat.expand(k, 4), envs_idx=idx, zero_velocity=True)
        self.robot.zero_all_dofs_velocity(idx)
        self.episode_length_buf[idx] = 0
        self.actions[idx] = 0.0
        self.last_actions[idx] = 0.0
        self._read_state()

    def _read_state(self) -> None:
        t = lambda x: torch.as_tensor(x, device=self.device).float()  # noqa: E731
        self.base_pos, quat = t(self.robot.get_pos()), t(self.robot.get_quat())
        self.lin_vel = _rotate_inverse(quat, t(self.robot.get_vel()))
        self.ang_vel = _rotate_inverse(quat, t(self.robot.get_ang()))
        self.proj_gravity = _rotate_inverse(quat, self.gravity.expand_as(self.lin_vel))
        self.roll_pitch = torch.stack(
            [
                torch.atan2(-self.proj_gravity[:, 1], -self.proj_gravity[:, 2]),
                torch.asin(self.proj_gravity[:, 0].clamp(-1, 1)),
            ],
            -1,
        )
        self.q = t(self.robot.get_dofs_position(self.dofs))
        self.qd = t(self.robot.get_dofs_velocity(self.dofs))

    def _reward(self) -> torch.Tensor:
        track = torch.exp(-(self.lin_vel[:, :2] - self.command[:2]).square().sum(-1) / 0.25)
        yaw = torch.exp(-self.ang_vel[:, 2].square() / 0.25)
        r = (
            1.0 * track
            + 0.2 * yaw
            - 1.0 * self.lin_vel[:, 2].square()
            - 0.005 * (self.actions - self.last_actions).square().sum(-1)
            - 50.0 * (self.base_pos[:, 2] - 0.3).square()
            - 0.05 * (self.q - self.q_default).abs().sum(-1)
        )
        return r * DT

    def _observe(self) -> None:
        cmd = self.command.expand(self.num_envs, 3)
        self.obs = torch.cat(
            [
                0.25 * self.ang_vel,
                self.proj_gravity,
                cmd,
                self.q - self.q_default,
                0.05 * self.qd,
                self.actions,
            ],
            -1,
        )
        self.critic_obs = torch.cat([self.obs, 2.0 * self.lin_vel], -1)


def make_go2(
    num_envs: int, device="cpu", seed: int | None = None, privileged_critic: bool = True, **kwargs
):
    """`envs.make("GenesisGo2-v0", ...)`: `Go2Walk` behind `FromRslRl` (observation groups kept when
    `privileged_critic`, else the policy group only)."""
    from envs.from_rsl_rl import FromRslRl

    return FromRslRl(
        Go2Walk(num_envs, device, seed),
        action_limit=ACTION_LIMIT,
        critic_group="critic" if privileged_critic else None,
        env_id="GenesisGo2-v0",
    )
