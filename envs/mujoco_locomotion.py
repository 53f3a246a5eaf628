"""Batched MuJoCo locomotion tasks with gymnasium v5 semantics: Ant, HalfCheetah, Hopper, Walker2d,
Humanoid.

One env class, two physics backends behind it:

* `batch`: MuJoCo's multi-threaded CPU batch (`mujoco.batch.Batch`, mujoco >= 4.0). The state of
  every world is a row of one float64 array; derived fields are bound as live `(N, ...)` arrays and
  read here as torch views without copies. Finished worlds are reset by index, no Python loop.
* `warp`: MuJoCo Warp (`mujoco-warp` + `warp-lang`, no JAX) on a CUDA device (or on Warp's CPU
  device, slowly: that is how its code path is tested without a GPU). Its arrays are handed to torch
  zero-copy (`wp.to_torch`); resets are masked on the device; nothing leaves the GPU in `step`.

`backend="auto"` picks `warp` on CUDA where MuJoCo Warp is installed and `batch` otherwise (the
evaluation's env, made with the defaults, so runs on a GPU without MuJoCo Warp). What each task
computes is what gymnasium's `<Task>-v5` computes from the same `MjModel` (the XML files shipped
with gymnasium): the same frame skip, observation layout, reward terms, healthy ranges, 1000-step
time limit and reset noise. `tests/test_mujoco_parity.py` checks this against `gymnasium.make(id)`
step by step.

Ant and Humanoid observe `cfrc_ext` (external contact forces per body), which gymnasium computes
with `mj_rnePostConstraint` after `mj_step`, i.e. at the RK4 integrator's last intermediate state.
`mujoco.batch.Batch` has no such call; the `batch` backend recovers that state from the fields the
step leaves behind (`envs/mujoco_stage.py`) and runs one `mj_forward` there, so its contact forces
match gymnasium's too (see `_BatchBackend`).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from common import graphs
from common.device import canonical, simulator_threads
from common.errors import UserError, MissingPackage, UserTypeError
from envs.base import ActionChecks

__all__ = ["MUJOCO_TASKS", "ALIASES", "make_mujoco", "Locomotion", "canonical_id", "BACKENDS"]

BACKENDS = ("auto", "batch", "warp")


def _assets_dir() -> Path:
    import gymnasium.envs.mujoco as gm

    return Path(gm.__file__).resolve().parent / "assets"


def _require_mujoco():
    try:
        import mujoco
    except ImportError as e:  # pragma: no cover - mujoco is in requirements.txt
        raise MissingPackage(
            "MuJoCo tasks need the `mujoco` package (>= 4.0): pip install 'mujoco>=4.0'"
        ) from e
    major = int(mujoco.__version__.split(".")[0])
    if major < 4:
        raise MissingPackage(
            f"MuJoCo tasks need mujoco >= 4.0 (for mujoco.batch), found {mujoco.__version__}: "
            f"pip install -U 'mujoco>=4.0'"
        )
    return mujoco


def _require_warp():
    try:
        import warp

        warp.config.quiet = True  # no per-module compile/load messages
        import mujoco_warp
    except ImportError as e:
        raise MissingPackage(
            "the `warp` MuJoCo backend needs MuJoCo Warp: pip install mujoco-warp warp-lang "
            "(or pass --mujoco-backend batch to simulate on the CPU)"
        ) from e
    return warp, mujoco_warp


def _mem_available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover
        pass
    return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


# --------------------------------------------------------------------------------------------------
# physics backends: both expose torch views of the fields the tasks read
# --------------------------------------------------------------------------------------------------
class _BatchBackend:
    """`mujoco.batch.Batch` on `nthread` CPU threads; fields are float64 torch views of its arrays.

    With `contact_forces`, `cfrc_ext` is computed as gymnasium does (after `mj_step`, at the RK4
    integrator's last intermediate state X3): the step is split as (frame_skip - 1) + 1 substeps
    to keep the solver warm start of the last one, X3 is recovered from the derived fields the step
    leaves behind (`envs.mujoco_stage`), one `mj_forward` runs there (the model's extra sensor makes
    it compute `cfrc_ext`), and the new state is put back, at a fraction of a step's cost.
    """

    name = "batch"
    dtype = torch.float64

    def __init__(
        self, model, num_envs: int, fields: tuple[str, ...], nthread: int, contact_forces: bool
    ):
        import mujoco.batch

        self.model = model
        self.sim_device = torch.device("cpu")
        self.batch = mujoco.batch.Batch(model, num_envs, nthread=nthread)
        self.nthread = self.batch.nthread
        self.state_rows = torch.from_numpy(self.batch.state)  # every world's full integration state
        self.contact_forces = contact_forces
        extra = ()
        if contact_forces:
            from envs.mujoco_stage import REQUIRED_FIELDS, StageStateReconstructor

            self.x3 = StageStateReconstructor(model)
            extra = REQUIRED_FIELDS + ("qacc_warmstart",)
        self.np = {}
        self.f = {}
        # bound before the first call
        for name in dict.fromkeys(("qpos", "qvel", "ctrl", *fields, *extra)):
            arr = self.batch.bind(name)
            if not arr.flags.writeable:  # outputs are read-only views; torch wants writeable memory
                arr = arr.view()
                arr.flags.writeable = True
            self.np[name] = arr
            self.f[name] = torch.from_numpy(arr)

    @staticmethod
    def bytes_per_world(model) -> int:
        import mujoco

        nstate = mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_INTEGRATION)
        # state row + the bound derived fields
        return 8 * (nstate + 2 * model.nbody * 22 + 6 * model.nv)

    def step(self, nstep: int) -> None:
        if not self.contact_forces:
            self.batch.step(nstep=nstep)
            return
        b, a = self.batch, self.np
        if nstep > 1:
            b.step(nstep=nstep - 1)
        warmstart = a["qacc_warmstart"].copy()  # what the last substep's solver starts from
        b.step(nstep=1)
        saved = self.batch.state.copy()
        qpos3, qvel3 = self.x3(a, qpos_ref=a["qpos"])
        a["qpos"][:] = qpos3
        a["qvel"][:] = qvel3
        a["qacc_warmstart"][:] = warmstart
        b.forward()  # at X3: the derived fields as after mj_step, plus cfrc_ext
        self.batch.state[:] = saved

    def reset(self, done: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        ids = done.nonzero().squeeze(-1).numpy()  # CPU backend: no device sync involved
        if ids.size == 0:
            return
        self.batch.reset(ids, stage=0)  # mj_resetData, as gymnasium's reset
        self.f["qpos"][ids] = qpos[ids]
        self.f["qvel"][ids] = qvel[ids]
        self.batch.forward(ids)  # mj_forward at the new initial state

    def get_state(self) -> torch.Tensor:
        return self.state_rows.clone()

    def set_state(self, rows: torch.Tensor) -> None:
        self.state_rows.copy_(rows)
        self.batch.forward()


class _WarpBackend:
    """MuJoCo Warp; fields are float32 torch views (zero-copy) of the Warp arrays on `device`."""

    name = "warp"
    dtype = torch.float32

    def __init__(
        self,
        model,
        num_envs: int,
        fields: tuple[str, ...],
        device: torch.device,
        frame_skip: int,
        contact_forces: bool,
        nconmax: int,
    ):
        wp, mjw = _require_warp()
        self.wp, self.mjw = wp, mjw
        self.model = model
        self.sim_device = device
        self.wp_device = "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"
        self.frame_skip = frame_skip
        self.contact_forces = contact_forces
        import mujoco

        if model.opt.solver == mujoco.mjtSolver.mjSOL_PGS:
            # Humanoid-v5's XML asks for PGS, which MuJoCo Warp does not have (CG and Newton only):
            # Newton, on a copy (the batch backend keeps PGS: the same without contacts,
            # tests/test_mujoco_parity.py; contacts are solved differently, as between any two
            # solvers)
            model = copy.deepcopy(model)
            model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
        with wp.ScopedDevice(self.wp_device):
            self.m = mjw.put_model(model)
            self.d = mjw.make_data(
                model, nworld=num_envs, nconmax=nconmax, njmax=6 * nconmax + 2 * model.nv
            )
        self.f = {
            name: wp.to_torch(getattr(self.d, name)) for name in ("qpos", "qvel", "ctrl", *fields)
        }
        self.warmstart = wp.to_torch(self.d.qacc_warmstart)
        # the reset's inputs and scratch: fixed buffers, so that a captured graph reads and writes
        # the same memory
        self._reset_mask = torch.zeros(num_envs, dtype=torch.bool, device=device)
        self._reset_mask_wp = wp.from_torch(self._reset_mask)
        self._reset_qpos = torch.zeros_like(self.f["qpos"])
        self._reset_qvel = torch.zeros_like(self.f["qvel"])
        self._keep_ws = torch.zeros_like(self.warmstart)
        # "step", "reset": CUDA graphs, captured on their second call
        self._graphs: dict[str, object] = {}
        self._warmed: set[str] = set()
        self._use_graph = device.type == "cuda"
        # CUDA: Warp's stream for this env's work (`_scope`)
        self._stream = self._torch_stream = None
        # (handle, Warp's view) of the stream of torch's capture, when inside one
        self._capture_stream = None

    @contextlib.contextmanager
    def _scope(self):
        """Warp's and torch's work inside runs on a stream of Warp's own, ordered after torch's
        current stream on entry and before it on exit (events: the host does not wait). Not torch's
        current stream itself: that is usually CUDA's legacy default stream, on which Warp cannot
        capture the frame-skip graph (a GPU run saw "Warp error: unknown stream" and fell back to
        ~100 launches per step and a host sync per solver iteration)."""
        if self.sim_device.type != "cuda":
            with self.wp.ScopedDevice(self.wp_device):
                yield
            return
        outer = torch.cuda.current_stream(self.sim_device)
        if torch.cuda.is_current_stream_capturing():
            # inside a capture of torch's (common.graphs): Warp works on the capture's own stream
            # (its solver loop pauses and resumes the capture there: on a forked stream CUDA error
            # 903), with no ordering after its previous stream (work outside the capture: CUDA error
            # 905)
            if self._capture_stream is None or self._capture_stream[0] != outer.cuda_stream:
                self._capture_stream = (outer.cuda_stream, self.wp.stream_from_torch(outer))
            with self.wp.ScopedStream(self._capture_stream[1], sync_enter=False):
                yield
            return
        if self._stream is None:
            self._stream = self.wp.Stream(self.wp_device)
            self._torch_stream = self.wp.stream_to_torch(self._stream)
        self._torch_stream.wait_stream(outer)
        with torch.cuda.stream(self._torch_stream), self.wp.ScopedStream(self._stream):
            yield
        outer.wait_stream(self._torch_stream)

    def _substeps(self) -> None:
        for _ in range(self.frame_skip):
            self.mjw.step(self.m, self.d)
        if self.contact_forces:  # as gymnasium: cfrc_ext from mj_rnePostConstraint after mj_step
            self.mjw.rne_postconstraint(self.m, self.d)

    def _launch(self, name: str, work) -> None:
        """Runs `work` (Warp launches, and torch ops in place on fixed buffers only: nothing
        allocated) on CUDA as a graph: the first call launches eagerly (kernels load), the second
        records it once (recording runs nothing), and every call replays it. A graph is one launch,
        and MuJoCo Warp's solver loop (`wp.capture_while`) becomes a conditional node in it;
        launched eagerly, that loop reads its condition on the host, a sync per solver iteration. On
        the CPU, `work` runs eagerly."""
        wp = self.wp
        if self._use_graph and torch.cuda.is_current_stream_capturing():
            # inside a capture of torch's other than `Captured`'s (which launches Warp's own graph
            # between its graphs: `step`): Warp records into it as an external capture, so that its
            # solver loop becomes a conditional node there too (slow to record: each capture
            # records every kernel of the step again)
            stream = wp.get_stream(self.wp_device)  # torch's capture stream (`_scope`)
            wp.capture_begin(stream=stream, external=True)
            try:
                work()
            finally:
                wp.capture_end(stream=stream)
            return
        if name not in self._graphs and self._use_graph and name in self._warmed:
            try:
                with wp.ScopedCapture() as capture:
                    work()
                self._graphs[name] = capture.graph
            except Exception as e:  # pragma: no cover - CUDA only
                import warnings

                warnings.warn(
                    f"MuJoCo Warp: CUDA graph capture failed ({e}); launching kernels one by one"
                )
                self._use_graph = False
        if name in self._graphs:
            wp.capture_launch(self._graphs[name])
        else:
            work()
            self._warmed.add(name)

    def step(self, nstep: int) -> None:
        # in a training iteration being captured (common.graphs.outside): the step's own graph is
        # launched here at each replay, not recorded into the iteration's again
        if not graphs.outside(self._step):
            self._step()

    def _step(self) -> None:
        with self._scope():
            self._launch("step", self._substeps)

    def _masked_reset(self) -> None:
        # mj_resetData on the worlds in the mask, their new state, then mj_forward (on every world:
        # forward() cannot be masked; the continuing worlds get their solver warm start back)
        self._keep_ws.copy_(self.warmstart)
        self.mjw.reset_data(self.m, self.d, reset=self._reset_mask_wp)
        m = self._reset_mask[:, None]
        torch.where(m, self._reset_qpos, self.f["qpos"], out=self.f["qpos"])
        torch.where(m, self._reset_qvel, self.f["qvel"], out=self.f["qvel"])
        self.mjw.forward(self.m, self.d)
        torch.where(m, self.warmstart, self._keep_ws, out=self.warmstart)

    def reset(self, done: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        # masked on the device (no host sync, whatever the number of finished worlds), captured as a
        # graph on CUDA like the step: the inputs go into the graph's fixed buffers first
        self._reset_mask.copy_(done)
        self._reset_qpos.copy_(qpos)
        self._reset_qvel.copy_(qvel)
        if not graphs.outside(self._reset):  # as the step
            self._reset()

    def _reset(self) -> None:
        with self._scope():
            self._launch("reset", self._masked_reset)

    def get_state(self) -> torch.Tensor:
        return torch.cat(
            [self.f["qpos"], self.f["qvel"], self.f["ctrl"], self.warmstart], dim=1
        ).clone()

    def set_state(self, rows: torch.Tensor) -> None:
        nq, nv, nu = self.model.nq, self.model.nv, self.model.nu
        qpos, qvel, ctrl, ws = rows.split([nq, nv, nu, nv], dim=1)
        self.f["qpos"].copy_(qpos)
        self.f["qvel"].copy_(qvel)
        self.f["ctrl"].copy_(ctrl)
        with self._scope():
            self.mjw.forward(self.m, self.d)
        self.warmstart.copy_(ws)


# --------------------------------------------------------------------------------------------------
# the env
# --------------------------------------------------------------------------------------------------
class Locomotion(ActionChecks, gym.vector.VectorEnv):
    """Base of the batched MuJoCo tasks; a subclass sets the model, frame skip and task terms.

    Follows the vec-env contract of `common/vec_env.py`: torch tensors on `device`, same-step
    autoreset with `info["final_obs"]`/`info["_final_obs"]` on every step, action checks.
    `dtype=torch.float64` returns observations and rewards in double precision (parity tests).
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
    env_id = "Locomotion"
    xml = ""
    frame_skip = 5
    max_episode_steps = 1000
    reset_noise_scale = 0.1
    qvel_noise = "uniform"  # or "normal": qvel = init + scale * N(0, 1)
    contact_forces = False  # observes cfrc_ext (Ant, Humanoid)
    exclude_qpos = 1  # leading qpos entries left out of the observation (x, or x and y)
    fields: tuple[str, ...] = ()  # derived MjData fields the task reads
    nconmax = 16

    def __init__(
        self,
        num_envs: int = 1,
        device="cpu",
        seed: int | None = None,
        backend: str = "auto",
        nthread: int | None = None,
        dtype: torch.dtype = torch.float32,
        validate_actions: bool = True,
        **kwargs,
    ):
        if kwargs:
            raise UserTypeError(f"{self.env_id}: unexpected options {sorted(kwargs)}")
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs <= 0:
            raise UserError(f"num_envs must be a positive integer (--num-envs), got {num_envs!r}")
        mujoco = _require_mujoco()
        self.num_envs = num_envs
        self.device = canonical(device)
        self.dtype = dtype
        self.validate_actions = validate_actions
        if backend not in BACKENDS:
            raise UserError(
                f"unknown MuJoCo backend {backend!r}: choose one of {', '.join(BACKENDS)}"
            )
        if backend == "auto":
            has_warp = importlib.util.find_spec("mujoco_warp") is not None
            backend = "warp" if self.device.type == "cuda" and has_warp else "batch"
        model = self._load_model(mujoco, backend)
        self.model = model
        self.dt = model.opt.timestep * self.frame_skip
        fields = tuple(self.fields) + (("cfrc_ext",) if self.contact_forces else ())
        if backend == "batch":
            # the run's `--threads` when given, else the cores (`common.device.simulator_threads`)
            nthread = simulator_threads() if nthread is None else nthread
            if nthread <= 0:
                raise UserError(f"nthread must be positive, got {nthread}")
            self._check_memory(_BatchBackend.bytes_per_world(model), "RAM", _mem_available_bytes())
            self.sim = _BatchBackend(model, num_envs, fields, nthread, self.contact_forces)
        elif backend == "warp":
            if self.device.type not in ("cuda", "cpu"):
                raise UserError(f"the warp backend runs on CUDA or CPU devices, not {self.device}")
            if self.device.type == "cuda":
                free = torch.cuda.mem_get_info(self.device)[0]
                self._check_memory(self._warp_bytes_per_world(model), "GPU memory", free)
            self.sim = _WarpBackend(
                model,
                num_envs,
                fields,
                self.device,
                self.frame_skip,
                self.contact_forces,
                self.nconmax,
            )
        self.backend = backend
        f = self.sim.f
        self.init_qpos = torch.as_tensor(
            model.qpos0, dtype=torch.float64, device=self.sim.sim_device
        )

        # spaces as gymnasium's: actions from the actuators' control ranges, float64 observations
        low, high = model.actuator_ctrlrange.T.astype(np.float32)
        self.single_action_space = gym.spaces.Box(low, high, dtype=np.float32)
        obs_dim = self._observe(fresh=None).shape[-1]
        obs_np_dtype = np.float64 if dtype == torch.float64 else np.float32
        self.single_observation_space = gym.spaces.Box(
            -np.inf, np.inf, (obs_dim,), dtype=obs_np_dtype
        )
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

        self.rng = torch.Generator(device=self.sim.sim_device)
        self.rng.manual_seed(
            int(np.random.SeedSequence(seed).generate_state(1)[0]) if seed is None else seed
        )
        self.elapsed = torch.zeros(num_envs, dtype=torch.long, device=self.sim.sim_device)
        self._invalid_action = torch.zeros((), dtype=torch.bool, device=self.device)
        self._discrete = False
        self._all = torch.ones(num_envs, dtype=torch.bool, device=self.sim.sim_device)
        self._com_before = torch.zeros(num_envs, 2, dtype=torch.float64, device=self.sim.sim_device)
        del f
        self._reset_worlds(self._all)

    # ---- model -----------------------------------------------------------------------------------
    def _load_model(self, mujoco, backend: str):
        path = _assets_dir() / self.xml
        if self.contact_forces and backend == "batch":
            # An accelerometer-type sensor makes mj_forward compute cfrc_ext (mj_rnePostConstraint);
            # sensors do not act on the dynamics.
            spec = mujoco.MjSpec.from_file(str(path))
            spec.add_sensor(
                type=mujoco.mjtSensor.mjSENS_FRAMELINACC,
                objtype=mujoco.mjtObj.mjOBJ_BODY,
                objname=spec.bodies[1].name,
            )
            return spec.compile()
        return mujoco.MjModel.from_xml_path(str(path))

    def _warp_bytes_per_world(self, model) -> int:
        # the big per-world arrays: dense constraint rows (njmax x nv) and contacts
        njmax = 6 * self.nconmax + 2 * model.nv
        return 4 * (
            njmax * (model.nv + 16) + self.nconmax * 64 + 40 * model.nbody + 8 * model.nv * model.nv
        )

    def _check_memory(self, per_world: int, what: str, available: int | None) -> None:
        need = per_world * self.num_envs
        if available is not None and need > 0.9 * available:
            fit = int(0.9 * available // per_world)
            raise MemoryError(
                f"{self.env_id} x {self.num_envs} worlds needs about {_gib(need)} of {what} "
                f"({per_world / 1024:.0f} KiB per world) but only {_gib(available)} is available; "
                f"use --num-envs {fit} or fewer"
            )

    # ---- task terms: subclasses override ---------------------------------------------------------
    def _com(self) -> torch.Tensor:
        """The (x, y) position whose change is the forward velocity (float64, [N, 2])."""
        return self.sim.f["qpos"][:, :2].to(torch.float64)

    def _healthy(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        return torch.ones(qpos.shape[0], dtype=torch.bool, device=qpos.device)

    def _observe(self, fresh: torch.Tensor | None) -> torch.Tensor:
        f = self.sim.f
        return torch.cat([f["qpos"][:, self.exclude_qpos :], f["qvel"]], dim=1)

    def _reward(
        self, x_vel: torch.Tensor, y_vel: torch.Tensor, action: torch.Tensor, healthy: torch.Tensor
    ):
        raise NotImplementedError

    def _clipped_contact_forces(self, fresh: torch.Tensor | None) -> torch.Tensor:
        """cfrc_ext clipped to the contact-force range; zero in worlds just reset (as after
        mj_forward)."""
        cf = self.sim.f["cfrc_ext"]
        if fresh is not None:
            cf = torch.where(fresh[:, None, None], torch.zeros_like(cf), cf)
        return cf

    # ---- reset -----------------------------------------------------------------------------------
    def _sample_qpos_qvel(self):
        n, nq, nv, s = self.num_envs, self.model.nq, self.model.nv, self.reset_noise_scale
        dev = self.sim.sim_device
        qpos = (
            self.init_qpos
            + (torch.rand(n, nq, generator=self.rng, device=dev, dtype=torch.float64) * 2 - 1) * s
        )
        if self.qvel_noise == "normal":
            qvel = s * torch.randn(n, nv, generator=self.rng, device=dev, dtype=torch.float64)
        else:
            qvel = (
                torch.rand(n, nv, generator=self.rng, device=dev, dtype=torch.float64) * 2 - 1
            ) * s
        return qpos, qvel

    def _reset_worlds(self, mask: torch.Tensor) -> None:
        qpos, qvel = self._sample_qpos_qvel()
        self.set_worlds(mask, qpos, qvel)

    def set_worlds(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Put the worlds in `mask` into state (qpos, qvel) as gymnasium's reset does (mj_resetData,
        the state, mj_forward); `qpos`/`qvel` are [N, nq]/[N, nv], rows outside `mask` are
        ignored."""
        mask = mask.to(self.sim.sim_device)
        self.sim.reset(
            mask,
            qpos.to(self.sim.sim_device, torch.float64),
            qvel.to(self.sim.sim_device, torch.float64),
        )
        # in place, as every state update of `step`: a captured graph (common.graphs) replays into
        # this memory
        torch.where(mask[:, None], self._com(), self._com_before, out=self._com_before)
        self.elapsed.masked_fill_(mask, 0)

    def _out(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(device=self.device, dtype=self.dtype)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.rng.manual_seed(int(seed))
        self._invalid_action.zero_()
        self._reset_worlds(self._all)
        return self._out(self._observe(fresh=self._all)), {}

    # ---- step ------------------------------------------------------------------------------------
    def step(self, actions):
        if self.validate_actions:
            actions = self._validate(actions)
        f = self.sim.f
        action = actions.to(self.sim.sim_device)
        f["ctrl"].copy_(action)
        self.sim.step(self.frame_skip)
        com_after = self._com()
        vel = (com_after - self._com_before) / self.dt
        qpos, qvel = f["qpos"].to(torch.float64), f["qvel"].to(torch.float64)
        healthy = self._healthy(qpos, qvel)
        reward = self._reward(vel[:, 0], vel[:, 1], action.to(torch.float64), healthy)
        terminated = ~healthy
        final_obs = self._observe(fresh=None)
        self._com_before.copy_(com_after)
        self.elapsed += 1
        truncated = self.elapsed >= self.max_episode_steps
        done = terminated | truncated
        # same-step autoreset of the finished worlds (masked: no Python loop over worlds)
        self._reset_worlds(done)
        obs = torch.where(done[:, None], self._observe(fresh=done), final_obs)
        info = {"final_obs": self._out(final_obs), "_final_obs": done.to(self.device)}
        reward = reward.to(
            self.device, torch.float64 if self.dtype == torch.float64 else torch.float32
        )
        return self._out(obs), reward, terminated.to(self.device), truncated.to(self.device), info

    # ---- checkpointable state --------------------------------------------------------------------
    def state_dict(self) -> dict:
        # copies: `step` writes these tensors in place (and `.cpu()` of a CPU tensor is the tensor
        # itself)
        return {
            "backend": self.backend,
            "sim": self.sim.get_state().cpu(),
            "elapsed": self.elapsed.to("cpu", copy=True),
            "com_before": self._com_before.to("cpu", copy=True),
            "rng": self.rng.get_state(),
        }

    def load_state_dict(self, sd: dict) -> None:
        rows = sd["sim"]
        if sd.get("backend") != self.backend:
            raise UserError(
                f"{self.env_id}: saved env state comes from the {sd.get('backend')!r} MuJoCo "
                f"backend, this env runs {self.backend!r}; resume with --mujoco-backend "
                f"{sd.get('backend')}"
            )
        if rows.shape[0] != self.num_envs:
            raise UserError(
                f"{self.env_id}: saved env state has {rows.shape[0]} worlds, this env has "
                f"{self.num_envs} (was it saved with another --num-envs?)"
            )
        self.sim.set_state(rows.to(self.sim.sim_device))
        self.elapsed.copy_(sd["elapsed"])
        self._com_before.copy_(sd["com_before"])
        self.rng.set_state(sd["rng"].cpu())  # a state loaded onto the GPU comes back to the host

    def close_extras(self, **kwargs):
        self.sim = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.env_id}, num_envs={self.num_envs}, "
            f"backend={self.backend}, device={self.device})"
        )


class Ant(Locomotion):
    """Ant-v5: a four-legged body; forward speed + healthy bonus - control and contact costs."""

    env_id, xml, frame_skip = "Ant-v5", "ant.xml", 5
    reset_noise_scale, qvel_noise = 0.1, "normal"
    contact_forces, exclude_qpos, fields, nconmax = True, 2, ("xpos",), 32
    healthy_z = (0.2, 1.0)

    def _com(self):
        return self.sim.f["xpos"][:, 1, :2].to(torch.float64)  # the torso (gymnasium's main_body=1)

    def _healthy(self, qpos, qvel):
        finite = torch.isfinite(qpos).all(1) & torch.isfinite(qvel).all(1)
        return finite & (qpos[:, 2] >= self.healthy_z[0]) & (qpos[:, 2] <= self.healthy_z[1])

    def _clipped(self, fresh):
        return self._clipped_contact_forces(fresh).clamp(-1.0, 1.0)

    def _observe(self, fresh):
        f = self.sim.f
        cf = self._clipped(fresh)[:, 1:].flatten(1)
        return torch.cat([f["qpos"][:, 2:], f["qvel"], cf.to(f["qpos"].dtype)], dim=1)

    def _reward(self, x_vel, y_vel, action, healthy):
        contact_cost = 5e-4 * self._clipped(None).to(torch.float64).square().sum((1, 2))
        return x_vel + healthy.to(torch.float64) - 0.5 * action.square().sum(1) - contact_cost


class HalfCheetah(Locomotion):
    """HalfCheetah-v5: a planar cheetah; forward speed - 0.1 * control cost, never terminates."""

    env_id, xml, frame_skip = "HalfCheetah-v5", "half_cheetah.xml", 5
    reset_noise_scale, qvel_noise = 0.1, "normal"

    def _reward(self, x_vel, y_vel, action, healthy):
        return x_vel - 0.1 * action.square().sum(1)


class Hopper(Locomotion):
    """Hopper-v5: a one-legged planar hopper; forward speed + healthy bonus - control cost."""

    env_id, xml, frame_skip = "Hopper-v5", "hopper.xml", 4
    reset_noise_scale, qvel_noise = 5e-3, "uniform"
    healthy_z, healthy_angle, healthy_state = (0.7, math.inf), (-0.2, 0.2), (-100.0, 100.0)

    def _healthy(self, qpos, qvel):
        z, angle = qpos[:, 1], qpos[:, 2]
        state = torch.cat([qpos[:, 2:], qvel], dim=1)
        ok_state = ((state > self.healthy_state[0]) & (state < self.healthy_state[1])).all(1)
        ok_z = (z > self.healthy_z[0]) & (z < self.healthy_z[1])
        ok_angle = (angle > self.healthy_angle[0]) & (angle < self.healthy_angle[1])
        return ok_state & ok_z & ok_angle

    def _observe(self, fresh):
        f = self.sim.f
        return torch.cat([f["qpos"][:, 1:], f["qvel"].clamp(-10.0, 10.0)], dim=1)

    def _reward(self, x_vel, y_vel, action, healthy):
        return x_vel + healthy.to(torch.float64) - 1e-3 * action.square().sum(1)


class Walker2d(Hopper):
    """Walker2d-v5: a two-legged planar walker; forward speed + healthy bonus - control cost."""

    env_id, xml, frame_skip = "Walker2d-v5", "walker2d_v5.xml", 4
    healthy_z, healthy_angle = (0.8, 2.0), (-1.0, 1.0)

    def _healthy(self, qpos, qvel):
        z, angle = qpos[:, 1], qpos[:, 2]
        return (
            (z > self.healthy_z[0])
            & (z < self.healthy_z[1])
            & (angle > self.healthy_angle[0])
            & (angle < self.healthy_angle[1])
        )


class Humanoid(Locomotion):
    """Humanoid-v5: a 3D biped; 1.25 x centre-of-mass speed + 5 healthy - control and contact
    costs."""

    env_id, xml, frame_skip = "Humanoid-v5", "humanoid.xml", 5
    reset_noise_scale, qvel_noise = 1e-2, "uniform"
    contact_forces, exclude_qpos, nconmax = True, 2, 64
    fields = ("xipos", "cinert", "cvel", "qfrc_actuator")
    healthy_z = (1.0, 2.0)

    def __init__(self, *args, **kwargs):
        self._mass = None
        super().__init__(*args, **kwargs)

    def _com(self):
        if self._mass is None:
            self._mass = torch.as_tensor(
                self.model.body_mass, dtype=torch.float64, device=self.sim.sim_device
            )
        xipos = self.sim.f["xipos"].to(torch.float64)
        return ((self._mass[None, :, None] * xipos).sum(1) / self._mass.sum())[:, :2]

    def _healthy(self, qpos, qvel):
        return (qpos[:, 2] > self.healthy_z[0]) & (qpos[:, 2] < self.healthy_z[1])

    def _observe(self, fresh):
        f = self.sim.f
        cf = self._clipped_contact_forces(fresh)[:, 1:].flatten(1)
        return torch.cat(
            [
                f["qpos"][:, 2:],
                f["qvel"],
                f["cinert"][:, 1:].flatten(1),
                f["cvel"][:, 1:].flatten(1),
                f["qfrc_actuator"][:, 6:],
                cf,
            ],
            dim=1,
        )

    def _reward(self, x_vel, y_vel, action, healthy):
        cf = self.sim.f["cfrc_ext"].to(torch.float64)
        contact_cost = (5e-7 * cf.square().sum((1, 2))).clamp(max=10.0)
        ctrl_cost = 0.1 * self.sim.f["ctrl"].to(torch.float64).square().sum(1)
        return 1.25 * x_vel + 5.0 * healthy.to(torch.float64) - ctrl_cost - contact_cost


MUJOCO_TASKS = {cls.env_id: cls for cls in (Ant, HalfCheetah, Hopper, Walker2d, Humanoid)}
ALIASES = {k.split("-")[0]: k for k in MUJOCO_TASKS}


def canonical_id(env_id: str) -> str | None:
    """`Ant` / `Ant-v5` -> `Ant-v5`; None for ids that are not batched MuJoCo tasks."""
    if env_id in MUJOCO_TASKS:
        return env_id
    return ALIASES.get(env_id)


def make_mujoco(env_id: str, num_envs: int = 1, device="cpu", seed=None, **kwargs) -> Locomotion:
    return MUJOCO_TASKS[canonical_id(env_id)](num_envs=num_envs, device=device, seed=seed, **kwargs)
