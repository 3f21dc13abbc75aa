"""Rotation and vector helpers, written once for the whole package.

Two layouts appear in wuji_jax:

* **components first** (the solver's and the chains' kernels): a vector is ``(3, *rest)``, a matrix
  ``(3, 3, *rest)``, where ``rest`` ends with the frames axis ``B``. Every product below is a
  broadcast multiply and a sum over a leading axis, which XLA fuses into one loop that vectorises
  over the frames (the minor axis);
* **components last** (public functions, numpy): ``(*batch, 3)`` / ``(*batch, 3, 3)``; the public
  functions transpose once at their boundary.

``sincos`` and ``atan2`` are exact to float32 rounding but much cheaper than XLA:CPU's own functions
(which cost 3–25 ns per element and keep the fusions around them from vectorising); other dtypes use
``jnp``'s functions.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "total", "contract", "take", "TAKE_MAX_RUNS", "summing", "REDUCE", "sincos", "atan2", "dot", "cross", "triple", "unit", "matvec", "matTvec", "matmul", "skew",
    "rodrigues", "so3_exp", "rpy_to_matrix", "matrix_to_quaternion",
]

# π/2 in three parts (Cody–Waite): k·_PIO2_1 and k·_PIO2_2 are exact in float32 for |k| < 2¹⁶
_PIO2_1 = 1.5703125
_PIO2_2 = 4.837512969970703125e-4
_PIO2_3 = (math.pi / 2 - _PIO2_1) - _PIO2_2


def _sincos32(x):
    k = jnp.round(x * np.float32(2 / math.pi))
    r = ((x - k * np.float32(_PIO2_1)) - k * np.float32(_PIO2_2)) - k * np.float32(_PIO2_3)
    z = r * r
    s = r + r * z * (np.float32(-1 / 6) + z * (np.float32(1 / 120) + z * (np.float32(-1 / 5040)
                                                                         + z * np.float32(1 / 362880))))
    c = 1 + z * (np.float32(-1 / 2) + z * (np.float32(1 / 24) + z * (np.float32(-1 / 720)
                                                                    + z * np.float32(1 / 40320))))
    quadrant = k.astype(jnp.int32)  # x = k·π/2 + r
    swap = (quadrant & 1) == 1
    sin = jnp.where(swap, c, s)
    cos = jnp.where(swap, s, c)
    sin = jnp.where((quadrant & 2) != 0, -sin, sin)
    cos = jnp.where(((quadrant + 1) & 2) != 0, -cos, cos)
    return sin, cos


@jax.custom_jvp
def sincos(x):
    """``(sin x, cos x)``; float32: one shared range reduction and Taylor polynomials on
    ``[−π/4, π/4]`` (error ≤ 1.2e-7 for ``|x| < 10⁵`` rad)."""
    if x.dtype == jnp.float32:
        return _sincos32(x)
    return jnp.sin(x), jnp.cos(x)


@sincos.defjvp
def _sincos_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    s, c = sincos(x)
    return (s, c), (c * dx, -s * dx)


def atan2(y, x):
    """``arctan2(y, x)``; float32: one division and Cephes' atanf polynomial (error ≤ 2e-7 rad)."""
    if y.dtype != jnp.float32:
        return jnp.arctan2(y, x)
    ax, ay = jnp.abs(x), jnp.abs(y)
    mx, mn = jnp.maximum(ax, ay), jnp.minimum(ax, ay)
    big = mn > np.float32(0.41421356) * mx  # reduce by π/4: atan(r) = π/4 + atan((r − 1)/(r + 1))
    z = jnp.where(big, mn - mx, mn) / jnp.maximum(jnp.where(big, mn + mx, mx), np.float32(1e-30))
    zz = z * z
    a = (((np.float32(8.05374449538e-2) * zz - np.float32(1.38776856032e-1)) * zz + np.float32(1.99777106478e-1))
         * zz - np.float32(3.33329491539e-1)) * zz * z + z
    a = jnp.where(big, a + np.float32(math.pi / 4), a)
    a = jnp.where(ay > ax, np.float32(math.pi / 2) - a, a)
    a = jnp.where(x < 0, np.float32(math.pi) - a, a)
    return jnp.where(y < 0, -a, a)


# ---------------------------------------------------------------------- components-first layout


_PLATFORM = contextvars.ContextVar("wuji_jax_summing_platform", default=None)
#: :func:`summing`'s argument for XLA reductions on every device, the CPU included
REDUCE = "reduce"


@contextlib.contextmanager
def summing(platform: str | None):
    """Within this context :func:`total` and :func:`contract` are traced for ``platform``'s compiler:
    as adds of slices for ``"cpu"``, as XLA reductions for any other (``None``: JAX's default backend,
    also outside any context; :data:`REDUCE`: reductions whatever the device). Only the generated
    code differs, not the values. The solver's entry points that know their device set it
    (``solve_batch(platform=)``, ``split_kernel``, ``FrameSolver``); the solver's derivative uses
    :data:`REDUCE` (:mod:`wuji_jax.ik.adjoint`: a smaller program for its few steps)."""
    token = _PLATFORM.set(platform)
    try:
        yield
    finally:
        _PLATFORM.reset(token)


def _reductions() -> bool:
    return (_PLATFORM.get() or jax.default_backend()) != "cpu"


def total(x, axis):
    """Sum over small axes (an int or a tuple): adds of slices for XLA:CPU, a reduction elsewhere
    (:func:`summing`).

    XLA:CPU runs a reduction over a non-minor axis many times slower than the same sum written as adds,
    which it fuses into one vectorised loop; on accelerators reductions compile sooner and run as fast
    (``docs/performance.md``, "Sums as adds of slices"). The axes summed in the kernels have 3–21
    entries.
    """
    if _reductions():
        return jnp.sum(x, axis=axis)
    for ax in sorted((axis,) if isinstance(axis, int) else axis, key=lambda a: a % x.ndim, reverse=True):
        ax = ax % x.ndim
        parts = [jax.lax.index_in_dim(x, i, ax, keepdims=False) for i in range(x.shape[ax])]
        x = parts[0]
        for p in parts[1:]:
            x = x + p
    return x


def contract(a, b, axis):
    """``Σ a·b`` over small axes (an int or a tuple) of the broadcast product; for XLA:CPU as adds of
    products of slices: ``total(a * b, axis)`` without the product ever stored (elsewhere a reduction
    of the product, :func:`summing`).

    Where the product of whole arrays has several users (one per slice), XLA:CPU writes it to memory
    before adding its slices (for the forward kinematics of a 256-frame chunk, a ``(3, 3, 3, 5, 256)``
    temporary per link); products of slices fuse with their sum into one loop. ``matmul``, ``matvec``,
    ``matTvec`` and ``dot`` use it (``docs/performance.md``, "Products of slices").
    """
    if _reductions():
        return jnp.sum(a * b, axis=axis)
    nd = max(a.ndim, b.ndim)
    a = a.reshape((1,) * (nd - a.ndim) + a.shape)
    b = b.reshape((1,) * (nd - b.ndim) + b.shape)
    axes = sorted({ax % nd for ax in ((axis,) if isinstance(axis, int) else axis)}, reverse=True)

    def pick(x, idx):
        for ax, i in zip(axes, idx):
            x = jax.lax.index_in_dim(x, min(i, x.shape[ax] - 1), ax, keepdims=False)
        return x

    out = None
    for idx in itertools.product(*[range(max(a.shape[ax], b.shape[ax])) for ax in axes]):
        term = pick(a, idx) * pick(b, idx)
        out = term if out is None else out + term
    return out


#: :func:`take` writes an index array of at most this many runs of consecutive indices as slices
TAKE_MAX_RUNS = 8


def take(x, idx, axis: int):
    """``x`` indexed along ``axis`` by a static integer array ``idx`` (any shape; its axes replace
    ``axis``): the values of ``x[..., idx, ...]``. Where ``idx`` is at most :data:`TAKE_MAX_RUNS`
    runs of consecutive indices, as slices of the runs, concatenated; else as the gather.

    The kernels' index arrays are constants of the model's chains. XLA:CPU runs the few-run ones
    faster as slices; every index array as slices would make the solver's program larger and slower
    to compile (``docs/performance.md``, "Gathers as slices of runs"). The results are the same, bit
    for bit.
    """
    idx = np.asarray(idx)
    axis = axis % x.ndim
    size = x.shape[axis]
    flat = np.where(idx < 0, idx + size, idx).ravel()
    if flat.size and not (0 <= flat.min() and flat.max() < size):
        raise IndexError(f"take: index {int(idx.ravel()[np.argmax((flat < 0) | (flat >= size))])} out of range "
                         f"for axis {axis} of size {size}")
    if not flat.size:
        return jnp.zeros(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)
    runs = np.split(flat, np.flatnonzero(np.diff(flat) != 1) + 1)  # consecutive indices
    if len(runs) > TAKE_MAX_RUNS:
        return x[(slice(None),) * axis + (idx,)]
    parts = [jax.lax.slice_in_dim(x, int(r[0]), int(r[-1]) + 1, axis=axis) for r in runs]
    out = parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis)
    return out.reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])

def dot(a, b):
    """``a · b`` over axis 0 of ``(3, *rest)`` arrays → ``rest``."""
    return contract(a, b, 0)


def cross(a, b):
    """``a × b`` over axis 0 of ``(3, *rest)`` arrays (broadcasting)."""
    return jnp.stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


def triple(a, b, c):
    """``a · (b × c)`` over axis 0 → ``rest``."""
    return dot(a, cross(b, c))


def unit(v):
    """``v / |v|`` over axis 0 (zero vectors stay finite)."""
    return v * jax.lax.rsqrt(jnp.maximum(dot(v, v), 1e-20))[None]


def _expand(A, v):
    """``A (3, 3, *r)`` with axes inserted after the first two so that it broadcasts against ``v``'s
    ``(3, *rest)`` where ``rest`` ends with ``r``."""
    extra = v.ndim - 1 - (A.ndim - 2)
    return A.reshape(A.shape[:2] + (1,) * extra + A.shape[2:]) if extra > 0 else A


def matvec(A, v):
    """``A v``: ``A (3, 3, *r)``, ``v (3, *rest)`` → ``(3, *rest)``."""
    return contract(_expand(A, v), v[None], 1)


def matTvec(A, v):
    """``Aᵀ v``: ``A (3, 3, *r)``, ``v (3, *rest)`` → ``(3, *rest)``."""
    return contract(_expand(A, v), v[:, None], 0)


def matmul(A, B):
    """``A B`` for ``(n, k, *rest)`` and ``(k, m, *rest)`` stacks (broadcasting) → ``(n, m, *rest)``."""
    return contract(A[:, :, None], B[None], 1)


def skew(v):
    """``[v]×`` ``(3, 3, *rest)`` of ``v (3, *rest)``: ``skew(v) @ u = v × u``."""
    zero = jnp.zeros_like(v[0])
    return jnp.stack([jnp.stack([zero, -v[2], v[1]]), jnp.stack([v[2], zero, -v[0]]),
                      jnp.stack([-v[1], v[0], zero])])


def rodrigues(axis, s, c):
    """``c I + s [a]× + (1 − c) a aᵀ`` ``(3, 3, *rest)`` for axes ``(3, *rest)`` and ``sin, cos``
    ``rest`` (broadcasting): the rotation by θ about a unit axis (used as is for any axis)."""
    eye = jnp.eye(3, dtype=s.dtype).reshape((3, 3) + (1,) * jnp.ndim(s))
    return c[None, None] * eye + s[None, None] * skew(axis) + (1 - c)[None, None] * (axis[:, None] * axis[None])


def so3_exp(phi):
    """Rotation matrices ``(3, 3, *rest)`` of rotation vectors ``phi (3, *rest)``; smooth at 0 (a
    Taylor series below 1e-4 rad, with a safe divisor in the branch not taken, so gradients stay
    finite there)."""
    th2 = dot(phi, phi)
    small = th2 < 1e-8
    th2s = jnp.where(small, 1.0, th2)
    th = jnp.sqrt(th2s)
    s, c = sincos(th)
    a = jnp.where(small, 1.0 - th2 / 6.0, s / th)
    b = jnp.where(small, 0.5 - th2 / 24.0, (1.0 - c) / th2s)
    K = skew(phi)
    eye = jnp.eye(3, dtype=phi.dtype).reshape((3, 3) + (1,) * (phi.ndim - 1))
    return eye + a[None, None] * K + b[None, None] * matmul(K, K)


# -------------------------------------------------------------------------------------- numpy


def rpy_to_matrix(rpy) -> np.ndarray:
    """URDF fixed-axis roll-pitch-yaw → rotation matrix ``Rz(yaw) @ Ry(pitch) @ Rx(roll)``."""
    r, p, y = rpy
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return rz @ ry @ rx


def matrix_to_quaternion(R) -> np.ndarray:
    """``(m, 3, 3)`` rotation matrices → ``(m, 4)`` unit quaternions ``(w, x, y, z)``, ``w ≥ 0``.

    Shepperd's branch choice: the largest of ``4w², 4x², 4y², 4z²`` is the pivot, so nothing is
    divided by a small number.
    """
    R = np.asarray(R, np.float64)
    m00, m11, m22 = R[:, 0, 0], R[:, 1, 1], R[:, 2, 2]
    d = np.stack([1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], 1)
    k = np.argmax(d, axis=1)
    s = 2.0 * np.sqrt(np.maximum(d[np.arange(len(k)), k], 1e-300))
    a21, a12 = R[:, 2, 1], R[:, 1, 2]
    a02, a20 = R[:, 0, 2], R[:, 2, 0]
    a10, a01 = R[:, 1, 0], R[:, 0, 1]
    cand = np.stack([
        np.stack([s / 4, (a21 - a12) / s, (a02 - a20) / s, (a10 - a01) / s], 1),
        np.stack([(a21 - a12) / s, s / 4, (a01 + a10) / s, (a02 + a20) / s], 1),
        np.stack([(a02 - a20) / s, (a01 + a10) / s, s / 4, (a12 + a21) / s], 1),
        np.stack([(a10 - a01) / s, (a02 + a20) / s, (a12 + a21) / s, s / 4], 1),
    ], 1)
    q = cand[np.arange(len(k)), k]
    q = q * np.where(q[:, :1] < 0, -1.0, 1.0)
    return q / np.linalg.norm(q, axis=1, keepdims=True)
