"""Reconstruct the last RK4 stage state X3 = (qpos3, qvel3) from derived fields.

Background
----------
With ``model.opt.integrator == mjINT_RK4``, ``mj_step`` evaluates the dynamics
(``mj_forwardSkip``, sensors skipped) at four stage states per substep; the
last one, X3, is (roughly) the initial state advanced by a full substep with
the stage-2 velocity/acceleration. It then restores the initial state and
advances it. It never re-runs the kinematics at the new state, so after the
step every derived field in MjData (xpos, xquat, cvel, cdof, contacts,
efc_force, ...) describes X3, while ``data.qpos`` / ``data.qvel`` hold the
*new* state. Gymnasium's Ant/Humanoid call ``mj_rnePostConstraint`` after
``mj_step``, so their ``cfrc_ext`` is the external (contact) force at X3.

This module inverts MuJoCo's kinematics (mj_kinematics / mj_comPos /
mj_comVel) to recover (qpos3, qvel3) from the derived fields that are left
behind by a step, vectorized over worlds:

* positions come from ``xpos`` / ``xquat`` (body poses) and the world-frame
  joint axes stored in ``cdof``;
* velocities come from ``cvel`` and ``cdof``: MuJoCo computes
  ``cvel[b] = cvel[parent[b]] + sum_j cdof[j] * qvel[j]`` over the dofs j of
  body b, so the body's dof velocities solve a small linear system.

Running ``mj_forward`` at (qpos3, qvel3) with the same ctrl/act reproduces
the step's derived fields, and with an acceleration sensor in the model (which
makes mj_forward call mj_rnePostConstraint) also gym's ``cfrc_ext``. The
constraint solver's ``qacc_warmstart`` is the one solver input not in
(qpos, qvel, ctrl, act): for Newton (Ant) any warmstart gives the same forces
to ~1e-11, but PGS (Humanoid, 50 iterations) is not converged, so the forward
must use the warmstart the step used in its last substep, i.e. the
``qacc_warmstart`` after ``frame_skip - 1`` substeps.

Recipe with ``mujoco.batch.Batch`` (model compiled with an accelerometer-type
sensor, e.g. ``spec.add_sensor(type=mjSENS_FRAMELINACC, objtype=mjOBJ_BODY,
objname="torso")``; bind ``REQUIRED_FIELDS`` and ``cfrc_ext`` *before* the
first call, since output fields are only filled by calls made after binding)::

    b.step(nstep=fs - 1); ws = qacc_warmstart.copy(); b.step(nstep=1)
    # or: ws = b.rollout(fs, record=("qacc_warmstart",))["qacc_warmstart"][:, fs - 2]
    new = qpos.copy(), qvel.copy(), qacc_warmstart.copy()
    qpos[:], qvel[:] = last_stage_state(model, bound, qpos_ref=new[0])
    qacc_warmstart[:] = ws
    b.forward(); cfrc_ext = b.bind("cfrc_ext").copy()
    qpos[:], qvel[:], qacc_warmstart[:] = new          # restore the new state

Fields used (each a ``[N, ...]`` array, e.g. from ``mujoco.batch.Batch.bind``):
``xpos [N,nbody,3]``, ``xquat [N,nbody,4]``, ``cvel [N,nbody,6]``,
``cdof [N,nv,6]``.

Supported joints: free (as the only joint of its body), hinge, slide, and ball
(as the last joint of its body).  A hinge that is not the last joint of its
body needs the next joint of that body to be a hinge or slide whose axis is
not parallel to it (the generic MuJoCo humanoid satisfies this).

Ambiguities that kinematics cannot resolve:

* hinge angles are only known modulo 2*pi, and ball quaternions only up to
  sign.  Pass ``qpos_ref`` (e.g. the new ``data.qpos`` after the step, which
  is within one substep of X3) to pick the nearest branch; without it hinge
  angles (relative to ``qpos0``) are wrapped to [-pi, pi) and ball quaternions
  get w >= 0.  Free-joint quaternions are exact (xquat of a free body is its
  normalized qpos quaternion, sign included).
* activations (``act``) and ``time`` are not reconstructed (na == 0 for Ant
  and Humanoid; X3's time is ``data.time`` after the step for RK4 since
  C[2] = 1, i.e. old_time + h).
"""

from __future__ import annotations

import mujoco
import numpy as np

__all__ = ["StageStateReconstructor", "REQUIRED_FIELDS"]

REQUIRED_FIELDS = ("xpos", "xquat", "cvel", "cdof")

_FREE = int(mujoco.mjtJoint.mjJNT_FREE)
_BALL = int(mujoco.mjtJoint.mjJNT_BALL)
_SLIDE = int(mujoco.mjtJoint.mjJNT_SLIDE)
_HINGE = int(mujoco.mjtJoint.mjJNT_HINGE)
_TWO_PI = 2.0 * np.pi


# ----------------------------------------------------------------------------
# small-vector helpers on [..., 3] / [..., 4] arrays (quaternions are w, x, y, z)
# Products are written as (outer product) @ (constant +-1 matrix): two numpy
# calls each, which matters because the per-call overhead dominates for the
# small arrays used here.
# ----------------------------------------------------------------------------
def _bilinear_matrix(table, n_in, n_out):
    """[n_in*n_in, n_out] matrix M with (a outer b).ravel() @ M = f(a, b)."""
    M = np.zeros((n_in * n_in, n_out))
    for i, j, k, sign in table:
        M[i * n_in + j, k] = sign
    return M


# quaternion product (a*b)_k = sum_ij M[4i+j, k] a_i b_j
_QMUL = _bilinear_matrix(
    [
        (0, 0, 0, 1),
        (1, 1, 0, -1),
        (2, 2, 0, -1),
        (3, 3, 0, -1),
        (0, 1, 1, 1),
        (1, 0, 1, 1),
        (2, 3, 1, 1),
        (3, 2, 1, -1),
        (0, 2, 2, 1),
        (1, 3, 2, -1),
        (2, 0, 2, 1),
        (3, 1, 2, 1),
        (0, 3, 3, 1),
        (1, 2, 3, 1),
        (2, 1, 3, -1),
        (3, 0, 3, 1),
    ],
    4,
    4,
)
# cross product
_CROSS = _bilinear_matrix(
    [(1, 2, 0, 1), (2, 1, 0, -1), (2, 0, 1, 1), (0, 2, 1, -1), (0, 1, 2, 1), (1, 0, 2, -1)], 3, 3
)
_CONJ = np.array([1.0, -1.0, -1.0, -1.0])


def _outer(a, b):
    a, b = np.broadcast_arrays(a, b)
    return (a[..., :, None] * b[..., None, :]).reshape(a.shape[:-1] + (-1,))


def _qmul(a, b):
    return _outer(a, b) @ _QMUL


def _cross(a, b):
    return _outer(a, b) @ _CROSS


def _dot3(a, b):
    return (a * b).sum(-1)


def _qrot(q, v):
    """Rotate vectors v [..., 3] by unit quaternions q [..., 4]."""
    u = q[..., 1:]
    t = 2.0 * _cross(u, v)
    return v + q[..., :1] * t + _cross(u, t)


def _axis_angle_quat(axis, angle):
    """Quaternion of a rotation by angle [...] about unit axis [..., 3]."""
    half = 0.5 * angle
    out = np.empty(angle.shape + (4,))
    out[..., 0] = np.cos(half)
    out[..., 1:] = np.sin(half)[..., None] * axis
    return out


def _solve3(c0, c1, c2, r):
    """Solve [c0 c1 c2] x = r (columns c_i [..., 3]) by Cramer's rule."""
    c12 = _cross(c1, c2)
    det = _dot3(c0, c12)
    x = np.empty(r.shape)
    x[..., 0] = _dot3(r, c12) / det
    x[..., 1] = _dot3(c0, _cross(r, c2)) / det
    x[..., 2] = _dot3(c0, _cross(c1, r)) / det
    return x


def _solve_spd(G, r):
    """Solve G x = r for stacked small symmetric positive definite G [..., k, k]."""
    k = G.shape[-1]
    if k == 2:
        a, b, c = G[..., 0, 0], G[..., 0, 1], G[..., 1, 1]
        det = a * c - b * b
        x = np.empty(r.shape)
        x[..., 0] = (c * r[..., 0] - b * r[..., 1]) / det
        x[..., 1] = (a * r[..., 1] - b * r[..., 0]) / det
        return x
    if k == 3:
        return _solve3(G[..., :, 0], G[..., :, 1], G[..., :, 2], r)
    return np.linalg.solve(G, r[..., None])[..., 0]


# ----------------------------------------------------------------------------
# reconstruction
# ----------------------------------------------------------------------------
class StageStateReconstructor:
    """Precomputed inverse kinematics plan for one model (see module doc).

    Call with a dict of bound ``[N, ...]`` arrays (``REQUIRED_FIELDS``);
    returns ``(qpos [N, nq], qvel [N, nv])``.  Only model constants are read
    (body_pos, body_quat, jnt_axis, jnt_pos, qpos0, tree structure); models
    with per-world values of those fields are not covered.
    """

    def __init__(self, model: mujoco.MjModel):
        m = model
        self.nq, self.nv, self.nbody = int(m.nq), int(m.nv), int(m.nbody)
        self.qpos0 = np.array(m.qpos0, dtype=np.float64)
        parent = np.array(m.body_parentid)

        # -------- free joints (only joint of their body): qpos = (xpos, xquat)
        free_b, free_q, free_d = [], [], []
        # -------- rotational joints (hinge/ball) grouped by their index among
        # the rotational joints of their body ("level"), so that one level is
        # processed for all bodies at once: Q_after = Q_before * R(joint)
        levels: dict[int, list] = {}
        slide_bodies = []
        for b in range(1, m.nbody):
            nj = int(m.body_jntnum[b])
            if nj == 0:
                continue
            j0 = int(m.body_jntadr[b])
            types = [int(m.jnt_type[j0 + k]) for k in range(nj)]
            if _FREE in types:
                if nj != 1:
                    raise NotImplementedError("free joint must be its body's only joint")
                free_b.append(b)
                free_q.append(int(m.jnt_qposadr[j0]))
                free_d.append(int(m.jnt_dofadr[j0]))
                continue
            level = 0
            for k, t in enumerate(types):
                j = j0 + k
                last = k == nj - 1
                if t == _SLIDE:
                    continue
                if t == _BALL and not last:
                    raise NotImplementedError("ball joint must be the last joint of its body")
                e = dict(
                    body=b,
                    type=t,
                    last=last,
                    qadr=int(m.jnt_qposadr[j]),
                    axis=np.array(m.jnt_axis[j]),
                )
                if t == _HINGE and not last:
                    # the angle turns the next joint's local axis into its world
                    # axis (in cdof): Q_after(this joint) * jnt_axis[next]
                    tn = int(m.jnt_type[j + 1])
                    if tn not in (_HINGE, _SLIDE):
                        raise NotImplementedError("hinge followed by a ball joint in one body")
                    v = np.array(m.jnt_axis[j + 1])
                    if np.linalg.norm(v - e["axis"] * np.dot(e["axis"], v)) < 1e-3:
                        raise NotImplementedError(
                            f"joint {j}: next joint axis (nearly) parallel, angle unobservable"
                        )
                    # flat index into cdof[n].ravel() of the next joint's world axis
                    off = 6 * int(m.jnt_dofadr[j + 1]) + (0 if tn == _HINGE else 3)
                    e.update(next_local=v, next_idx=off + np.arange(3))
                levels.setdefault(level, []).append(e)
                level += 1
            if _SLIDE in types:
                slide_bodies.append(b)
        self.free = (np.array(free_b, int), np.array(free_q, int), np.array(free_d, int))

        def sub(es, idx, key):
            return np.array([es[i][key] for i in idx])

        self.levels = []
        for lev in sorted(levels):
            es = levels[lev]
            L = dict(level=lev, body=sub(es, range(len(es)), "body"))
            L["parent"] = parent[L["body"]]
            L["body_quat"] = np.array(m.body_quat)[L["body"]]
            for kind, sel in (
                ("last", lambda e: e["type"] == _HINGE and e["last"]),
                ("mid", lambda e: e["type"] == _HINGE and not e["last"]),
                ("ball", lambda e: e["type"] == _BALL),
            ):
                idx = [i for i, e in enumerate(es) if sel(e)]
                g = dict(idx=np.array(idx, int))
                if idx:
                    g["body"] = sub(es, idx, "body")
                    g["axis"] = sub(es, idx, "axis")
                    g["qadr"] = sub(es, idx, "qadr")
                    if kind == "mid":
                        g["next_local"] = sub(es, idx, "next_local")
                        g["next_idx"] = sub(es, idx, "next_idx")
                        # next_local projected off the hinge axis (constant)
                        a, v = g["axis"], g["next_local"]
                        g["v_perp"] = v - a * _dot3(v, a)[:, None]
                L[kind] = g
            self.levels.append(L)

        # -------- slide joints: per body, solved after the rotations
        #   xpos = p0 + sum_slide axis_w * (q - qpos0) + sum_rot (Q_before - Q_after) jnt_pos
        self.slide_plan = []
        for b in slide_bodies:
            j0, nj = int(m.body_jntadr[b]), int(m.body_jntnum[b])
            jnts = range(j0, j0 + nj)
            sl = [j for j in jnts if int(m.jnt_type[j]) == _SLIDE]
            if np.linalg.matrix_rank(np.array([m.jnt_axis[j] for j in sl]), tol=1e-6) < len(sl):
                raise NotImplementedError(f"body {b}: linearly dependent slide axes")
            rot = [j for j in jnts if int(m.jnt_type[j]) != _SLIDE]
            self.slide_plan.append(
                dict(
                    body=b,
                    parent=int(parent[b]),
                    body_pos=np.array(m.body_pos[b]),
                    slide_dof=np.array([int(m.jnt_dofadr[j]) for j in sl]),
                    slide_qadr=np.array([int(m.jnt_qposadr[j]) for j in sl]),
                    # (rotational level, jnt_pos) of off-center rotational joints
                    rot=[
                        (lev, np.array(m.jnt_pos[j]))
                        for lev, j in enumerate(rot)
                        if np.any(m.jnt_pos[j] != 0)
                    ],
                )
            )

        # -------- velocities of non-free bodies, grouped by dof count k
        groups: dict[int, list] = {}
        for b in range(1, m.nbody):
            k = int(m.body_dofnum[b])
            if k and b not in free_b:
                groups.setdefault(k, []).append(b)
        self.vel_groups = []
        for k, bs in sorted(groups.items()):
            # bodies with 2 or 3 hinges use only the angular rows (exact 3x3
            # solve, better conditioned than the 6-D normal equations)
            hinge_only = [
                all(
                    int(m.jnt_type[m.dof_jntid[d]]) == _HINGE
                    for d in range(m.body_dofadr[b], m.body_dofadr[b] + k)
                )
                for b in bs
            ]
            for ang in (True, False):
                sel = np.array(
                    [b for b, h in zip(bs, hinge_only) if h == ang and k in (2, 3)]
                    if ang
                    else [b for b, h in zip(bs, hinge_only) if not (h and k in (2, 3))],
                    int,
                )
                if sel.size:
                    dofs = np.array(
                        [np.arange(m.body_dofadr[b], m.body_dofadr[b] + k) for b in sel]
                    )
                    self.vel_groups.append((k, ang, sel, parent[sel], dofs))

    # ------------------------------------------------------------------
    def __call__(self, bound, qpos_ref=None):
        xpos = np.asarray(bound["xpos"])
        xquat = np.asarray(bound["xquat"])
        cvel = np.asarray(bound["cvel"])
        cdof = np.asarray(bound["cdof"])
        n = xpos.shape[0]
        qpos = np.empty((n, self.nq))
        qvel = np.empty((n, self.nv))
        cdof_flat = cdof.reshape(n, -1)

        # ---- free joints: xpos/xquat are qpos exactly (xquat = normalized quat)
        fb, fq, fd = self.free
        if fb.size:
            qi = fq[:, None] + np.arange(7)
            qpos[:, qi[:, :3]] = xpos[:, fb]
            qpos[:, qi[:, 3:]] = xquat[:, fb]

        # ---- rotational joints, one level at a time over all bodies
        # qcur[:, b]: frame of body b before the rotational joint of this level
        qcur = np.empty((n, self.nbody, 4))
        frames = {}  # (body, level) -> (Q_before, Q_after), for slides
        for L in self.levels:
            bodies = L["body"]
            if L["level"] == 0:
                qb = _qmul(xquat[:, L["parent"]], L["body_quat"])  # [N,J,4]
            else:
                qb = qcur[:, bodies]
            qa = np.empty_like(qb)

            g = L["last"]  # last joint of its body: full relative rotation known
            if g["idx"].size:
                i = g["idx"]
                qrel = _qmul(qb[:, i] * _CONJ, xquat[:, g["body"]])
                ang = 2.0 * np.arctan2(_dot3(qrel[..., 1:], g["axis"]), qrel[..., 0])
                self._set_hinge(qpos, g["qadr"], ang, qpos_ref)
                qa[:, i] = xquat[:, g["body"]]  # frame after a body's last joint

            g = L["mid"]  # followed by a joint with a non-parallel axis
            if g["idx"].size:
                i, a = g["idx"], g["axis"]
                u = _qrot(qb[:, i] * _CONJ, cdof_flat[:, g["next_idx"]])  # local frame
                u_perp = u - a * _dot3(u, a)[..., None]
                ang = np.arctan2(_dot3(_cross(g["v_perp"], u_perp), a), _dot3(u_perp, g["v_perp"]))
                ang = self._set_hinge(qpos, g["qadr"], ang, qpos_ref)
                qa[:, i] = _qmul(qb[:, i], _axis_angle_quat(a, ang))

            g = L["ball"]  # ball (always last): qpos quat = conj(Q_before) * xquat
            if g["idx"].size:
                i = g["idx"]
                q = _qmul(qb[:, i] * _CONJ, xquat[:, g["body"]])
                qi = g["qadr"][:, None] + np.arange(4)
                # sign: nearest to the reference, else w >= 0
                s = (q * qpos_ref[:, qi]).sum(-1) if qpos_ref is not None else q[..., 0]
                q = np.where(s[..., None] < 0, -q, q)
                q /= np.sqrt((q * q).sum(-1, keepdims=True))
                qpos[:, qi] = q
                qa[:, i] = xquat[:, g["body"]]

            qcur[:, bodies] = qa
            if self.slide_plan:
                for c, b in enumerate(bodies):
                    frames[(b, L["level"])] = (qb[:, c], qa[:, c])

        # ---- slide joints (rare): least squares on the body position
        for sp in self.slide_plan:
            b = sp["body"]
            r = xpos[:, b] - xpos[:, sp["parent"]] - _qrot(xquat[:, sp["parent"]], sp["body_pos"])
            for lev, jp in sp["rot"]:
                q_b, q_a = frames[(b, lev)]
                r = r - (_qrot(q_b, jp) - _qrot(q_a, jp))
            W = cdof[:, sp["slide_dof"], 3:]  # [N,k,3]
            G = (W[:, :, None, :] * W[:, None, :, :]).sum(-1)
            d = (
                _solve_spd(G, (W * r[:, None, :]).sum(-1))
                if len(sp["slide_dof"]) > 1
                else (W[:, 0] * r).sum(-1, keepdims=True) / G[:, 0]
            )
            qpos[:, sp["slide_qadr"]] = d + self.qpos0[sp["slide_qadr"]]

        # ---- velocities
        # free joint: cvel[b] = [R w_loc, v + (R w_loc) x (c - anchor)], whose
        # dof columns are cdof[d+3+i] = [R e_i, R e_i x (c - anchor)], cdof[d+i] = [0, e_i]
        if fb.size:
            dv = cvel[:, fb]  # world parent: 0
            rot = cdof[:, fd[:, None] + np.arange(3, 6)]  # [N,F,3,6]
            # R^T w, as an exact 3x3 solve (the columns are orthonormal only to rounding)
            w_loc = _solve3(rot[..., 0, :3], rot[..., 1, :3], rot[..., 2, :3], dv[..., :3])
            v = dv[..., 3:] - (w_loc[..., None] * rot[..., 3:]).sum(-2)
            qvel[:, fd[:, None] + np.arange(3)] = v
            qvel[:, fd[:, None] + np.arange(3, 6)] = w_loc
        # other bodies: cvel[b] - cvel[parent] = sum_j cdof[j] qvel[j]  (6 x k, least squares)
        for k, ang, bs, ps, dofs in self.vel_groups:
            delta = cvel[:, bs] - cvel[:, ps]  # [N,B,6]
            if ang:
                # 2-3 hinges: delta_w = sum_j axis_j qvel_j; solve [a1 a2 (a3 | a1 x a2)]
                A = cdof[:, dofs, :3]  # [N,B,k,3] rows
                a3 = A[:, :, 2] if k == 3 else _cross(A[:, :, 0], A[:, :, 1])
                x = _solve3(A[:, :, 0], A[:, :, 1], a3, delta[..., :3])
                qvel[:, dofs] = x[..., :k]
            elif k == 1:
                C = cdof[:, dofs[:, 0]]  # [N,B,6]
                qvel[:, dofs[:, 0]] = (C * delta).sum(-1) / (C * C).sum(-1)
            else:
                C = cdof[:, dofs]  # [N,B,k,6]
                G = (C[:, :, :, None, :] * C[:, :, None, :, :]).sum(-1)
                qvel[:, dofs] = _solve_spd(G, (C * delta[:, :, None, :]).sum(-1))
        return qpos, qvel

    def _set_hinge(self, qpos, qadr, ang, qpos_ref):
        """Write hinge qpos = qpos0 + angle on the right 2*pi branch; return angle."""
        q0 = self.qpos0[qadr]
        if qpos_ref is not None:
            ang = ang + _TWO_PI * np.round((qpos_ref[:, qadr] - q0 - ang) / _TWO_PI)
        else:
            ang = (ang + np.pi) % _TWO_PI - np.pi
        qpos[:, qadr] = q0 + ang
        return ang
