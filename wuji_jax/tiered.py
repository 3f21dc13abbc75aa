"""Answers while XLA compiles: a program's jaxpr evaluated in numpy, the compiled program afterwards.

A fresh process pays XLA's compilation before a jitted program's first answer: for the solver on a
2-core CPU, 2–3 s after 0.5–0.9 s of tracing. Its jaxpr (the traced program, JAX's public
``jax.jit(f).trace(...).jaxpr``) holds about 8,000 equations, most of them on a few numbers per frame;
numpy runs them, one after the other, in tens of milliseconds for a frame or a small batch.
:class:`Tiered` does both: it traces a function once, starts its compilation in a thread of its own
(XLA compiles without holding Python's lock), and answers the calls that come before the compiled
program is ready by evaluating the jaxpr with :func:`evaluate`; later calls run the compiled program.

The two tiers compute the same operations in the same dtype, but not bit for bit alike: XLA fuses
operations and may contract a multiply and an add into one rounding, numpy rounds each. On the
solver the first answers differ from the compiled program's by float32 rounding (see
``tests/test_tiered.py`` for the bounds the tests hold). ``WUJI_JAX_TIERED=0`` turns the numpy tier
off: every call then waits for the compiled program.

:func:`evaluate` knows the primitives the package's programs use (elementwise arithmetic, shapes,
``gather``/``scatter``, reductions, ``while``/``scan``/``cond``, nested ``jit`` and custom derivative
rules, ``dot_general``, ``shard_map`` without collectives). A program with another primitive raises :class:`Unsupported`, and
:class:`Tiered` then waits for the compiled program: a missing primitive costs time, never a wrong
answer. Inside :func:`numpy_only` a program answers in numpy and starts no compilation until a call
outside the block needs it: for a few calls whose compiled program would go unused. Only JAX's
public API is read: ``ClosedJaxpr``, equations' primitive names and parameters, variables' ``aval``.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import threading
import warnings

import numpy as np

__all__ = ["evaluate", "Unsupported", "Tiered", "ENV_TIERED", "enabled", "compiling", "wait", "numpy_only"]

#: environment variable: ``0`` turns the numpy tier off (every call waits for the compiled program)
ENV_TIERED = "WUJI_JAX_TIERED"


def enabled() -> bool:
    """Whether :class:`Tiered` answers in numpy while it compiles (``$WUJI_JAX_TIERED`` is not 0)."""
    return os.environ.get(ENV_TIERED, "").strip().lower() not in ("0", "false", "no", "off")


class Unsupported(NotImplementedError):
    """A primitive :func:`evaluate` does not know (its name is the message)."""


# ------------------------------------------------------------------------------------------ primitives

_IMPL: dict = {}


def _op(*names):
    def register(fn):
        for name in names:
            _IMPL[name] = fn
        return fn
    return register


#: primitives computed by one numpy function of their operands, called as it is (parameters such as
#: JAX's ``accuracy`` are ignored: numpy has no such setting)
_PLAIN: dict = {}

for _name, _fn in [("neg", np.negative), ("abs", np.abs), ("sign", np.sign), ("sqrt", np.sqrt),
                   ("rsqrt", lambda x: 1 / np.sqrt(x)), ("exp", np.exp), ("exp2", np.exp2), ("log", np.log),
                   ("log1p", np.log1p), ("expm1", np.expm1), ("sin", np.sin), ("cos", np.cos), ("tan", np.tan),
                   ("asin", np.arcsin), ("acos", np.arccos), ("atan", np.arctan), ("sinh", np.sinh),
                   ("cosh", np.cosh), ("tanh", np.tanh), ("floor", np.floor), ("ceil", np.ceil),
                   ("is_finite", np.isfinite), ("not", np.invert), ("square", np.square),
                   ("cbrt", np.cbrt), ("logistic", lambda x: 1 / (1 + np.exp(-x))),
                   ("stop_gradient", lambda x: x), ("copy", lambda x: x), ("copy_p", lambda x: x),
                   ("real", np.real), ("imag", np.imag), ("conj", np.conj)]:
    _PLAIN[_name] = _fn

for _name, _fn in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("max", np.maximum),
                   ("min", np.minimum), ("pow", np.power), ("atan2", np.arctan2), ("nextafter", np.nextafter),
                   ("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                   ("gt", np.greater), ("ge", np.greater_equal), ("and", np.bitwise_and),
                   ("or", np.bitwise_or), ("xor", np.bitwise_xor), ("shift_left", np.left_shift),
                   ("add_any", np.add)]:
    _PLAIN[_name] = _fn


@_op("div")
def _div(x, y, **_):
    if np.result_type(x, y).kind in "iu":  # XLA: the quotient rounded towards zero
        q = np.floor_divide(x, y)
        return np.where((np.remainder(x, y) != 0) & ((x < 0) != (y < 0)), q + 1, q)
    return np.true_divide(x, y)


@_op("rem")
def _rem(x, y, **_):
    return np.fmod(x, y)  # the sign of the dividend, as C and XLA


@_op("integer_pow")
def _integer_pow(x, *, y, **_):
    return x ** y


@_op("round")
def _round(x, *, rounding_method, **_):
    if int(rounding_method) == 1:  # to nearest even
        return np.rint(x)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)  # away from zero


@_op("select_n")
def _select_n(which, *cases, **_):
    if len(cases) == 2:
        return np.where(which, cases[1], cases[0])
    return np.choose(np.asarray(which, np.int64), np.broadcast_arrays(*cases))


@_op("clamp")
def _clamp(lo, x, hi, **_):
    return np.minimum(np.maximum(x, lo), hi)


@_op("transpose")
def _transpose(x, *, permutation, **_):
    return np.transpose(x, permutation)


@_op("rev")
def _rev(x, *, dimensions, **_):
    return np.flip(x, tuple(dimensions))


@_op("concatenate")
def _concatenate(*xs, dimension, **_):
    return np.concatenate(xs, dimension)


@_op("stack")
def _stack(*xs, axis, **_):
    return np.stack(xs, axis)


@_op("split")
def _split(x, *, sizes, axis, **_):
    return np.split(x, np.cumsum(sizes)[:-1], axis)


def _starts(x_shape, sizes, starts):
    return [min(max(int(s), 0), n - k) for s, n, k in zip(starts, x_shape, sizes)]  # clamped, as XLA


@_op("dynamic_slice")
def _dynamic_slice(x, *starts, slice_sizes, **_):
    at = _starts(x.shape, slice_sizes, starts[:x.ndim])
    return x[tuple(slice(a, a + k) for a, k in zip(at, slice_sizes))]


@_op("dynamic_update_slice")
def _dynamic_update_slice(x, update, *starts, **_):
    at = _starts(x.shape, update.shape, starts)
    out = np.array(x)
    out[tuple(slice(a, a + k) for a, k in zip(at, update.shape))] = update
    return out


@_op("pad")
def _pad(x, value, *, padding_config, **_):
    if any(i for _, _, i in padding_config) or any(lo < 0 or hi < 0 for lo, hi, _ in padding_config):
        raise Unsupported("pad (interior or negative)")
    return np.pad(x, [(lo, hi) for lo, hi, _ in padding_config], constant_values=value)


@_op("iota")
def _iota(*dyn, dtype, shape, dimension, **_):
    ar = np.arange(shape[dimension], dtype=dtype).reshape([-1 if d == dimension else 1 for d in range(len(shape))])
    return np.broadcast_to(ar, shape)


def _reduction(fn):
    return lambda x, *, axes, **_: fn(x, axis=tuple(axes))


_IMPL.update({"reduce_sum": _reduction(np.sum), "reduce_max": _reduction(np.max), "reduce_min": _reduction(np.min),
              "reduce_prod": _reduction(np.prod), "reduce_and": _reduction(np.all), "reduce_or": _reduction(np.any)})


_IMPL["argmax"] = lambda x, *, axes, index_dtype, **_: np.argmax(x, axis=axes[0]).astype(index_dtype)
_IMPL["argmin"] = lambda x, *, axes, index_dtype, **_: np.argmin(x, axis=axes[0]).astype(index_dtype)


@_op("dot_general")
def _dot_general(a, b, *, dimension_numbers, preferred_element_type=None, **_):
    (ca, cb), (ba, bb) = dimension_numbers
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    sa, sb = [None] * a.ndim, [None] * b.ndim
    for i, j in zip(ba, bb):
        sa[i] = sb[j] = next(letters)
    for i, j in zip(ca, cb):
        sa[i] = sb[j] = next(letters)
    for s in (sa, sb):
        for i, v in enumerate(s):
            if v is None:
                s[i] = next(letters)
    out = [sa[i] for i in ba] + [v for i, v in enumerate(sa) if i not in ba and i not in ca] \
        + [v for i, v in enumerate(sb) if i not in bb and i not in cb]
    r = np.einsum(f"{''.join(sa)},{''.join(sb)}->{''.join(out)}", a, b)
    return r if preferred_element_type is None else r.astype(preferred_element_type)


def _mode_name(mode) -> str:
    return str(getattr(mode, "name", mode)).upper()


def _window_starts(dn_batch_operand, dn_batch_indices, index_map, indices, operand_shape):
    """Per index row ``(N, rank)`` the start of its window in the operand, and the batch shape."""
    batch_shape = indices.shape[:-1]
    idx = indices.reshape(-1, indices.shape[-1]).astype(np.int64)
    starts = np.zeros((idx.shape[0], len(operand_shape)), np.int64)
    if len(index_map):
        starts[:, list(index_map)] = idx
    if dn_batch_operand:
        pos = np.indices(batch_shape).reshape(len(batch_shape), -1)
        for od, sd in zip(dn_batch_operand, dn_batch_indices):
            starts[:, od] = pos[sd]
    return starts, batch_shape


def _grid(starts, sizes):
    N, rank = starts.shape
    return tuple((starts[:, d].reshape((N,) + (1,) * rank)
                  + np.arange(sizes[d]).reshape((1,) + tuple(sizes[d] if e == d else 1 for e in range(rank))))
                 for d in range(rank))


@_op("gather")
def _gather(x, indices, *, dimension_numbers, slice_sizes, mode, fill_value=None, **_):
    dn = dimension_numbers
    starts, batch_shape = _window_starts(dn.operand_batching_dims, dn.start_indices_batching_dims,
                                         dn.start_index_map, np.asarray(indices), x.shape)
    sizes = np.asarray(slice_sizes, np.int64)
    hi = np.asarray(x.shape, np.int64) - sizes
    out = np.array(x[_grid(np.clip(starts, 0, hi), sizes)])  # (N, *slice_sizes)
    if "FILL" in _mode_name(mode):
        mapped = list(dn.start_index_map)
        oob = np.any((starts[:, mapped] < 0) | (starts[:, mapped] > hi[mapped]), axis=1)
        if oob.any():
            dt = out.dtype
            fill = fill_value if fill_value is not None else (
                np.nan if dt.kind in "fc" else True if dt.kind == "b" else
                np.iinfo(dt).min if dt.kind == "i" else np.iinfo(dt).max)
            out[oob] = fill
    drop = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    out = out.reshape(batch_shape + tuple(int(s) for d, s in enumerate(sizes) if d not in drop))
    nb, rank = len(batch_shape), out.ndim
    offset = list(dn.offset_dims)
    batch_pos = [p for p in range(rank) if p not in offset]
    return np.transpose(out, [nb + offset.index(p) if p in offset else batch_pos.index(p) for p in range(rank)])


_COMBINE = {"scatter": None, "scatter-add": np.add, "scatter-mul": np.multiply, "scatter-min": np.minimum,
            "scatter-max": np.maximum}


def _scatter_with(combine):
    def scatter(x, indices, updates, *, dimension_numbers, mode, update_jaxpr=None, **_):
        dn = dimension_numbers
        indices, updates = np.asarray(indices), np.asarray(updates)
        starts, batch_shape = _window_starts(dn.operand_batching_dims, dn.scatter_indices_batching_dims,
                                             dn.scatter_dims_to_operand_dims, indices, x.shape)
        window = list(dn.update_window_dims)
        scatter_dims = [d for d in range(updates.ndim) if d not in window]
        inserted = set(dn.inserted_window_dims) | set(dn.operand_batching_dims)
        sizes, it = [], iter(updates.shape[d] for d in window)
        for d in range(x.ndim):
            sizes.append(1 if d in inserted else next(it))
        N = starts.shape[0]
        upd = np.transpose(updates, scatter_dims + window).reshape((N,) + tuple(sizes))
        hi = np.asarray(x.shape, np.int64) - np.asarray(sizes, np.int64)
        if "CLIP" in _mode_name(mode):
            starts = np.clip(starts, 0, hi)
        else:  # XLA skips a window that does not fit
            inside = np.all((starts >= 0) & (starts <= hi), axis=1)
            starts, upd = starts[inside], upd[inside]
        out = np.array(x)
        grid = _grid(starts, sizes)
        if combine is None:
            out[grid] = upd
        else:
            combine.at(out, grid, upd)
        return out
    return scatter


for _name, _fn in _COMBINE.items():
    _IMPL[_name] = _scatter_with(_fn)


# --------------------------------------------------------------------------------- the evaluator

def _parts(jaxpr):
    """``(Jaxpr, consts)`` of a ``ClosedJaxpr`` or an open ``Jaxpr``."""
    inner = getattr(jaxpr, "jaxpr", None)
    return (inner, list(jaxpr.consts)) if inner is not None else (jaxpr, [])


_CALLS = ("pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr",
          "checkpoint", "remat")


class _Program:
    """A jaxpr made into a flat list of steps: each reads its inputs from numbered slots, calls its
    primitive's function and writes its outputs to slots (no lookups by variable at run time). Nested
    calls (``jit``, custom derivative rules, ``checkpoint``) are inlined; loops and conditionals are
    steps that run programs of their own."""

    def __init__(self, jaxpr):
        jaxpr, consts = _parts(jaxpr)
        self.values: list = []  # the slots' initial values: constants and literals, None for variables
        self.steps: list = []
        self.inputs = [self._slot() for _ in jaxpr.invars]
        self.outputs = self._emit(jaxpr, [self._slot(np.asarray(c)) for c in consts] + self.inputs)

    def _slot(self, value=None) -> int:
        self.values.append(value)
        return len(self.values) - 1

    def _emit(self, jaxpr, in_slots) -> list:
        """The steps of ``jaxpr`` whose constants and inputs are in ``in_slots``; returns its outputs' slots."""
        slots = dict(zip(list(jaxpr.constvars) + list(jaxpr.invars), in_slots))

        def read(v):
            return self._slot(np.asarray(v.val, v.aval.dtype)) if hasattr(v, "val") else slots[v]  # a literal

        for e in jaxpr.eqns:
            ins = [read(v) for v in e.invars]
            if e.primitive.name in _CALLS:
                sub = next((e.params[k] for k in ("jaxpr", "call_jaxpr", "fun_jaxpr") if e.params.get(k) is not None), None)
                if sub is None:
                    raise Unsupported(f"{e.primitive.name} without a jaxpr")
                sub, consts = _parts(sub)
                outs = self._emit(sub, [self._slot(np.asarray(c)) for c in consts] + ins)
            else:
                outs = [self._slot() for _ in e.outvars]
                dtypes = [np.dtype(v.aval.dtype) for v in e.outvars]
                fn = _step_function(e)
                if e.primitive.multiple_results:
                    self.steps.append((0, fn, ins, outs, dtypes))
                else:  # the common cases unpacked: one or two operands, one output
                    arity = len(ins) if len(ins) in (1, 2) else 3
                    self.steps.append((arity, fn, ins[0] if arity == 1 else ins, outs[0], dtypes[0]))
            slots.update(zip(e.outvars, outs))
        return [read(v) for v in jaxpr.outvars]

    def __call__(self, *args):
        env = list(self.values)
        for i, a in zip(self.inputs, args):
            env[i] = a
        for arity, fn, ins, out, dt in self.steps:
            if arity == 2:
                r = fn(env[ins[0]], env[ins[1]])
            elif arity == 1:
                r = fn(env[ins])
            elif arity == 3:
                r = fn(*[env[i] for i in ins])
            else:  # several outputs
                for i, r, d in zip(out, fn(*[env[i] for i in ins]), dt):
                    r = np.asarray(r)
                    env[i] = r if r.dtype == d else r.astype(d)
                continue
            if getattr(r, "dtype", None) != dt:  # (numpy's promotion; a Python scalar)
                r = np.asarray(r).astype(dt)
            env[out] = r
        return [env[i] for i in self.outputs]


def _shaped(e):
    """Steps whose output shape is known from the equation: reshaped without computing it each call."""
    name, shape = e.primitive.name, tuple(e.outvars[0].aval.shape)
    if name in ("squeeze", "reshape", "expand_dims", "broadcast_in_dim") and len(e.invars) > 1:
        raise Unsupported(f"{name} with a dynamic shape")
    if name in ("squeeze", "reshape", "expand_dims"):
        return lambda x: x.reshape(shape)
    if name == "broadcast_in_dim":
        src = tuple(e.invars[0].aval.shape)
        kept = [1] * len(shape)
        for i, d in enumerate(e.params["broadcast_dimensions"]):
            kept[d] = src[i]
        if int(np.prod(kept)) == int(np.prod(shape)):
            return lambda x: x.reshape(shape)
        return lambda x: np.broadcast_to(x.reshape(kept), shape)
    if name == "slice":
        p = e.params
        index = tuple(slice(a, b, s) for a, b, s in zip(p["start_indices"], p["limit_indices"],
                                                        p["strides"] or (1,) * len(shape)))
        return lambda x: x[index]
    if name == "convert_element_type":
        dt = np.dtype(e.outvars[0].aval.dtype)
        return lambda x: np.asarray(x).astype(dt)
    return None


def _step_function(e):
    """The function of one equation's inputs that computes its outputs."""
    name, params = e.primitive.name, dict(e.params)
    shaped = _shaped(e)
    if shaped is not None:
        return shaped
    if name == "while":
        cond, body = _Program(params["cond_jaxpr"]), _Program(params["body_jaxpr"])
        nc, nb = params["cond_nconsts"], params["body_nconsts"]

        def run_while(*a):
            cc, bc, carry = a[:nc], a[nc:nc + nb], list(a[nc + nb:])
            while bool(cond(*cc, *carry)[0]):
                carry = body(*bc, *carry)
            return carry
        return run_while
    if name == "scan":
        body = _Program(params["jaxpr"])
        nconst, ncarry, length, reverse = params["num_consts"], params["num_carry"], params["length"], params["reverse"]

        def run_scan(*a):
            consts, carry, xs = a[:nconst], list(a[nconst:nconst + ncarry]), a[nconst + ncarry:]
            ys = []
            for i in (reversed(range(length)) if reverse else range(length)):
                out = body(*consts, *carry, *[x[i] for x in xs])
                carry, y = out[:ncarry], out[ncarry:]
                ys.append(y)
            if reverse:
                ys.reverse()
            n_ys = len(body.outputs) - ncarry
            stacked = [np.stack([y[k] for y in ys]) if ys else None for k in range(n_ys)]
            return list(carry) + stacked
        return run_scan
    if name == "cond":
        branches = [_Program(b) for b in params["branches"]]

        def run_cond(index, *ops):
            return branches[min(max(int(index), 0), len(branches) - 1)](*ops)
        return run_cond
    if name == "shard_map":
        return _shard_map(_Program(params["jaxpr"]), params["mesh"], params["in_specs"], params["out_specs"])
    if name in ("optimization_barrier", "device_put"):  # values unchanged (a device_put's copy is the host's)
        return (lambda *a: list(a)) if e.primitive.multiple_results else (lambda a, **_: a)
    if name in _PLAIN:
        return _PLAIN[name]
    impl = _IMPL.get(name)
    if impl is None:
        raise Unsupported(name)
    return functools.partial(impl, **params) if params else impl


def _spec_axes(spec, ndim: int) -> list:
    """Per array dimension, the mesh axes it is split over (``()``: not split), from a ``PartitionSpec``."""
    entries = list(spec) + [None] * (ndim - len(spec))
    return [() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in entries]


def _shard_map(body, mesh, in_specs, out_specs):
    """``shard_map`` without collectives: the body run on each device's block of the inputs, one device
    after the other, and its outputs put together as ``out_specs`` says (a body that talks across
    devices, ``psum`` or ``axis_index``, is :class:`Unsupported` by its primitives)."""
    sizes = dict(mesh.shape)
    names = list(sizes)

    def block(pos, axes):  # the block index along a dimension split over ``axes``, and their count
        index, count = 0, 1
        for a in axes:
            index, count = index * sizes[a] + pos[a], count * sizes[a]
        return index, count

    def run(*args):
        outs: list = [None] * len(out_specs)
        for idx in itertools.product(*(range(sizes[a]) for a in names)):
            pos = dict(zip(names, idx))
            local = []
            for x, spec in zip(args, in_specs):
                x = np.asarray(x)
                for d, axes in enumerate(_spec_axes(spec, x.ndim)):
                    if axes:
                        i, n = block(pos, axes)
                        step = x.shape[d] // n
                        x = x[(slice(None),) * d + (slice(i * step, (i + 1) * step),)]
                local.append(x)
            res = body(*local)
            for k, (r, spec) in enumerate(zip(res, out_specs)):
                r = np.asarray(r)
                split = _spec_axes(spec, r.ndim)
                mentioned = {a for axes in split for a in axes}
                if any(pos[a] for a in names if a not in mentioned):
                    continue  # replicated over this axis: device 0's value
                if outs[k] is None:
                    outs[k] = np.empty(tuple(n * (block(pos, axes)[1] if axes else 1)
                                             for n, axes in zip(r.shape, split)), r.dtype)
                at = tuple(slice(block(pos, axes)[0] * n, (block(pos, axes)[0] + 1) * n) if axes else slice(None)
                           for n, axes in zip(r.shape, split))
                outs[k][at] = r
        return outs

    return run


def evaluate(jaxpr, *args) -> list:
    """The outputs (a list of numpy arrays) of ``jaxpr`` (a ``ClosedJaxpr``, e.g. ``jax.make_jaxpr(f)(*xs)``
    or ``jax.jit(f).trace(*xs).jaxpr``) on ``args``, the flat inputs, computed op by op with numpy.
    Raises :class:`Unsupported` for a primitive it does not know (before computing anything)."""
    return _run(_Program(jaxpr), args)


def _run(program: _Program, args) -> list:
    with np.errstate(all="ignore"):  # IEEE results (inf, NaN) as XLA's, without numpy's warnings
        return [np.asarray(r) for r in program(*[np.asarray(a) for a in args])]


# ------------------------------------------------------------------------------------- the two tiers

_pending: set = set()  # threads still compiling (waited for at exit: XLA must not be torn down under them)


def compiling() -> int:
    """How many :class:`Tiered` programs of this process are still compiling."""
    return sum(thread.is_alive() for thread in list(_pending))


@atexit.register
def wait() -> None:
    """Wait until every :class:`Tiered` program of this process is compiled (e.g. before timing the
    compiled programs). Also run at exit: XLA is not torn down under a compilation."""
    for thread in list(_pending):
        thread.join()


_holding = 0  # open numpy_only blocks (process-wide)
_starting = threading.Lock()  # a held compilation is started once, whichever thread needs it first


@contextlib.contextmanager
def numpy_only():
    """Inside the block, :class:`Tiered` programs (``solve``'s chunks, ``FrameSolver``'s frames) answer
    in numpy and start no compilation: for a few calls whose compiled program would go unused (a
    check of some answers, a script that solves a handful of frames and exits), where XLA would
    otherwise take a CPU core for seconds in the background, and the process would wait for it at exit.

    A program first called inside the block starts compiling at its first call after it (answering in
    numpy meanwhile, as ever); :attr:`Tiered.compiled` compiles it at once, and a program the numpy tier
    cannot run is compiled and waited for, as outside. Where the numpy tier is off
    (``WUJI_JAX_TIERED=0``) the block changes nothing. Process-wide, for the block's duration."""
    global _holding
    _holding += 1
    try:
        yield
    finally:
        _holding -= 1


def _is_spec(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


class Tiered:
    """A jitted function answered in numpy until its compilation is done, by the compiled program after.

    Args:
        fn: a function of arrays (pytrees of arrays), traced once here for ``args``.
        args: arrays or :class:`jax.ShapeDtypeStruct` (with their shardings) giving the shapes.
        compiler_options: for XLA (``Lowered.compile``).
        tiered: answer in numpy meanwhile (default :func:`enabled`); ``False``: compile here, now.

    Called with arguments shaped like ``args``, it returns the compiled program's outputs (JAX
    arrays) or, until that program is ready, the same outputs computed in numpy (numpy arrays in the
    same pytree). :attr:`compiled` waits for the compiled program and raises its error, if any.
    """

    def __init__(self, fn, *args, compiler_options: dict | None = None, tiered: bool | None = None):
        import jax

        traced = jax.jit(fn).trace(*args)
        self.jaxpr = traced.jaxpr
        self.out_tree = jax.tree_util.tree_structure(traced.out_info, is_leaf=_is_spec)  # (out_tree: jax ≥ 0.7)
        self._compiled, self._error, self._thread = None, None, None
        self._steps = None  # the jaxpr's numpy program, made on the first numpy call, dropped once compiled
        self._numpy_ok = enabled() if tiered is None else tiered
        options = compiler_options or None
        if not self._numpy_ok:
            self._compiled = traced.lower().compile(compiler_options=options)
            return

        def work():  # lowered here too: its Python shares the lock with the first numpy answers
            try:
                self._compiled = traced.lower().compile(compiler_options=options)
            except BaseException as e:  # raised to the caller by compiled
                self._error = e
            finally:
                _pending.discard(threading.current_thread())

        self._thread = threading.Thread(target=work, name="wuji_jax-compile", daemon=True)
        if not _holding:  # inside numpy_only: the thread starts when a call outside the block needs it
            self._start()

    @property
    def _held(self) -> bool:
        """The compilation is held back (:func:`numpy_only`): its thread is made, not started."""
        return self._thread is not None and self._thread.ident is None

    def _start(self) -> None:
        with _starting:
            thread = self._thread
            if thread is not None and thread.ident is None:  # not started yet (two threads may ask at once)
                _pending.add(thread)
                thread.start()

    @property
    def ready(self) -> bool:
        """The compiled program is made (or failed)."""
        return self._thread is None or (not self._held and not self._thread.is_alive())

    @property
    def compiled(self):
        """The compiled program (``jax.stages.Compiled``), waiting for it if need be (compiling it now
        where :func:`numpy_only` held it back)."""
        if self._thread is not None:
            self._start()
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._compiled

    def numpy(self, *args):
        """The outputs computed in numpy (the outputs' pytree of numpy arrays), or None where the numpy
        tier is off or cannot run this program (:class:`Unsupported`, or any error of the evaluator,
        which is warned about once): from then on every call waits for the compiled program."""
        import jax

        if not self._numpy_ok:
            return None
        leaves = jax.tree_util.tree_leaves(args)
        try:
            if len(leaves) != len(self.jaxpr.jaxpr.invars):  # (a jax that passes constants as inputs)
                raise Unsupported(f"{len(self.jaxpr.jaxpr.invars)} jaxpr inputs for {len(leaves)} arguments")
            if self._steps is None:
                self._steps = _Program(self.jaxpr)
            return jax.tree_util.tree_unflatten(self.out_tree, _run(self._steps, leaves))
        except Unsupported:
            self._numpy_ok = False
            return None
        except Exception as e:  # a fault of this evaluator: never the caller's problem; said once
            self._numpy_ok = False
            warnings.warn(f"wuji_jax: the numpy tier failed ({type(e).__name__}: {e}); waiting for the compiled "
                          f"program instead (set {ENV_TIERED}=0 to skip the numpy tier)", RuntimeWarning, stacklevel=3)
            return None

    def __call__(self, *args):
        if self._thread is not None:  # (None: compiled, the plain call below)
            if not _holding and self._held:  # first called inside numpy_only, now needed outside it
                self._start()
            if self._held or self._thread.is_alive():
                out = self.numpy(*args)
                if out is not None:
                    return out
            program = self.compiled  # raises the compilation's error, if any
            self._thread, self._steps = None, None
            return program(*args)
        return self._compiled(*args)
