"""Randomized stress: seeded sequences of allocations, copies, views, fills, launches and closes, checked
against a numpy model of every byte of device memory.

The model mirrors each allocation as a byte array plus a mask of which bytes are *known* (``empty()``
leaves memory uninitialized). Views are windows into their allocation's bytes, so aliasing is modelled
exactly: a write through one view is seen through every other. Before each step the model predicts the
outcome -- success, or the exception rawcuda must raise (ClosedError for a closed object, TypeError for a
dtype mismatch, ValueError for a size, shape or range mismatch) -- and the step must do exactly that:

* a successful read must return the model's bytes, bit for bit, wherever they are known;
* a refused step must raise the predicted class (a rawcuda exception, or a TypeError/ValueError raised by
  rawcuda's own checks) and leave memory unchanged;
* nothing may crash, and after each sequence every object is closed and device memory is back.

Kernel results are exact where IEEE arithmetic makes them so (vector_add; saxpy with alpha in {+-1, +-2},
so alpha * x is exact and the GPU's fused multiply-add rounds like numpy; bias+ReLU; transpose), and
checked within a tolerance and then adopted by the model otherwise (gelu, matmul, sum). Results whose bits
IEEE leaves open (NaN payloads, the sign of a zero from fmaxf) are marked unknown rather than guessed.

Kernel outputs never overlap their inputs: the kernels declare ``__restrict__`` pointers.
"""

from __future__ import annotations

import gc
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from rawcuda import ClosedError, DeviceBuffer, PinnedBuffer, RawCudaError, Stream, ops
from rawcuda.core.context import Context, default_context
from rawcuda.ops import sgemm

pytestmark = pytest.mark.gpu

SEEDS = (11, 23, 37, 41, 59)
STEPS_PER_SEED = 700  # 3,500 steps in all: a few seconds on an H200
MAX_LIVE = 16  # entries (buffers and views) kept at once; older ones are closed and forgotten
SIZES_1D = (0, 1, 2, 3, 31, 33, 255, 257, 1023, 1025)
MAX_1D = 2048
EXTENTS_2D = (0, 1, 3, 7, 16, 31, 33, 48)
DTYPES = (np.float32, np.float32, np.float32, np.float32, np.float64, np.int32, np.int16, np.uint8)
F32 = np.dtype(np.float32)
SAXPY_ALPHAS = (1.0, 2.0, -1.0, -2.0)  # alpha * x exact in float32: fma and numpy round alike
BAD_OPERAND_P = 0.2  # how often a kernel gets one random (possibly wrong or closed) operand
AUDIT_EVERY = 100  # steps between full comparisons of every open buffer with the model
FLOAT32_EPS = float(np.finfo(np.float32).eps)
SCALED = 1e30  # |x| above this (or non-finite) is not compared after a reduction: sums could overflow
MATMUL_SCALED = 1e15  # products of such values summed over 48 terms stay far below float32's maximum
GELU_SCALED = 1e4
LEAK_TOLERANCE = 4 << 20
ACCEPTED = (RawCudaError, TypeError, ValueError)  # what rawcuda raises on purpose

Prediction = type[Exception] | None


@dataclass(eq=False)
class Root:
    """One allocation, as the model sees it."""

    data: np.ndarray  # uint8: the bytes the GPU should hold
    known: np.ndarray  # bool per byte: False where the memory was never written
    closed: bool = False


@dataclass(eq=False)
class Entry:
    """A DeviceBuffer (or view) and where its bytes lie in the model."""

    buf: DeviceBuffer
    root: Root
    offset: int
    closed_self: bool = False

    @property
    def closed(self) -> bool:
        return self.closed_self or self.root.closed

    @property
    def dtype(self) -> np.dtype:
        return self.buf.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.buf.shape

    @property
    def size(self) -> int:
        return self.buf.size

    @property
    def nbytes(self) -> int:
        return self.buf.nbytes

    def overlaps(self, other: Entry) -> bool:
        return (
            self.root is other.root
            and self.nbytes > 0
            and other.nbytes > 0
            and self.offset < other.offset + other.nbytes
            and other.offset < self.offset + self.nbytes
        )

    def values(self) -> tuple[np.ndarray, np.ndarray]:
        """The model's values (this dtype and shape) and, per element, whether all its bytes are known."""
        window = slice(self.offset, self.offset + self.nbytes)
        values = self.root.data[window].view(self.dtype).reshape(self.shape)
        known = self.root.known[window].reshape(-1, self.dtype.itemsize).all(axis=1).reshape(self.shape)
        return values.copy(), known

    def write(self, values: Any, known: np.ndarray | None = None) -> None:
        raw = np.ascontiguousarray(np.broadcast_to(np.asarray(values, self.dtype), self.shape)).view(np.uint8)
        window = slice(self.offset, self.offset + self.nbytes)
        self.root.data[window] = raw.reshape(-1)
        if known is None:
            self.root.known[window] = True
        else:
            self.root.known[window] = np.repeat(np.asarray(known, bool).reshape(-1), self.dtype.itemsize)


class StepFailedError(AssertionError):
    pass


@dataclass
class Stress:
    """One seeded sequence: the live entries, the model, and what happened."""

    seed: int
    ctx: Context
    stream: Stream
    rng: np.random.Generator = field(init=False)
    entries: list[Entry] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)
    step: int = 0
    what: str = ""

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    # --- choosing things ----------------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, options: Any) -> Any:
        return options[int(self.rng.integers(len(options)))]

    def on(self) -> Stream | None:
        """Half the operations are ordered on the sequence's stream, half are fully synchronous."""
        return self.stream if self.chance(0.5) else None

    def random_shape(self) -> tuple[int, ...]:
        if self.chance(0.3):
            return (self.pick(EXTENTS_2D), self.pick(EXTENTS_2D))
        if self.chance(0.5):
            return (self.pick(SIZES_1D),)
        return (int(self.rng.integers(0, MAX_1D // 2)) * 2 + 1,)  # odd sizes: never a multiple of a vector

    def random_values(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        dt = np.dtype(dtype)
        if dt.kind == "f":
            scale = 10.0 ** self.rng.uniform(-3, 3)
            return (self.rng.standard_normal(shape) * scale).astype(dt)
        info = np.iinfo(dt)
        return self.rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dt)

    def any_entry(self) -> Entry:
        if not self.entries:
            self.alloc()
        return self.pick(self.entries)

    def open_f32(self, shape: tuple[int, ...], avoid: tuple[Entry, ...] = ()) -> Entry:
        """An open float32 entry of exactly ``shape`` not overlapping ``avoid``: an existing one or a new one."""
        fits = [
            e
            for e in self.entries
            if not e.closed and e.dtype == F32 and e.shape == shape and not any(e.overlaps(a) for a in avoid)
        ]
        if fits and self.chance(0.7):
            return self.pick(fits)
        return self.new_entry(shape, F32, "from_array")

    def new_entry(self, shape: tuple[int, ...], dtype: Any, how: str) -> Entry:
        dt = np.dtype(dtype)
        host = self.random_values(shape, dt)
        on = self.on()
        if how == "empty":
            buf = DeviceBuffer.empty(shape, dt)
        elif how == "zeros":
            buf = DeviceBuffer.zeros(shape, dt, stream=on)
        else:
            buf = DeviceBuffer.from_array(host, stream=on)
        nbytes = buf.nbytes
        entry = Entry(buf, Root(np.zeros(nbytes, np.uint8), np.zeros(nbytes, bool)), 0)
        if how == "zeros":
            entry.write(np.zeros(shape, dt))
        elif how == "from_array":
            entry.write(host)
        self.entries.append(entry)
        return entry

    def trim(self) -> None:
        """Forget closed entries first, then close and forget the oldest allocations (between steps only, so
        that nothing a step has chosen -- and predicted the outcome for -- is closed under it)."""
        if len(self.entries) <= MAX_LIVE:
            return
        self.entries = [e for e in self.entries if not e.closed] or self.entries[-1:]
        while len(self.entries) > MAX_LIVE:
            victim = self.entries[0].root
            for e in self.entries:
                if e.root is victim:
                    e.buf.close()
            victim.closed = True
            self.entries = [e for e in self.entries if e.root is not victim]

    # --- running a step against its prediction ---------------------------------------------------------------
    def attempt(self, predicted: Prediction, action: Callable[[], Any]) -> tuple[bool, Any]:
        """Run ``action``; it must raise ``predicted`` or, when None, succeed. Returns (succeeded, result)."""
        where = f"seed {self.seed} step {self.step}: {self.what}"
        try:
            result = action()
        except Exception as exc:
            if predicted is None:
                raise StepFailedError(
                    f"{where}: raised {type(exc).__name__}: {exc}; the model expected success"
                ) from exc
            if not isinstance(exc, predicted) or not isinstance(exc, ACCEPTED):
                raise StepFailedError(
                    f"{where}: raised {type(exc).__name__}: {exc}; the model expected {predicted.__name__}"
                ) from exc
            self.stats[self.what.split()[0] + " refused"] += 1
            return False, None
        if predicted is not None:
            raise StepFailedError(f"{where}: succeeded; the model expected {predicted.__name__}")
        self.stats[self.what.split()[0] + " ok"] += 1
        return True, result

    def compare(self, entry: Entry, got: np.ndarray) -> None:
        """The bytes read back must equal the model's wherever the model knows them."""
        expected, known = entry.values()
        assert got.shape == entry.shape and got.dtype == entry.dtype, (got.shape, got.dtype, entry.shape)
        got_bytes = np.ascontiguousarray(got).view(np.uint8).reshape(entry.size, -1) if entry.size else None
        want_bytes = expected.view(np.uint8).reshape(entry.size, -1) if entry.size else None
        if got_bytes is not None and want_bytes is not None:
            bad = np.flatnonzero(known.reshape(-1) & (got_bytes != want_bytes).any(axis=1))
            assert bad.size == 0, (
                f"seed {self.seed} step {self.step}: {self.what}: {bad.size} element(s) differ "
                f"from the model, first at {bad[0]}: got {got.reshape(-1)[bad[0]]!r}, "
                f"expected {expected.reshape(-1)[bad[0]]!r}"
            )

    # --- the operations -------------------------------------------------------------------------------------
    def alloc(self) -> None:
        shape, dtype = self.random_shape(), self.pick(DTYPES)
        how = self.pick(("empty", "zeros", "from_array"))
        self.what = f"alloc {how} {shape} {np.dtype(dtype)}"
        self.attempt(None, lambda: self.new_entry(shape, dtype, how))

    def view(self) -> None:
        entry = self.any_entry()
        if entry.shape and self.chance(0.4):
            self.slice_view(entry)
            return
        dtype = None if self.chance(0.6) else np.dtype(self.pick(DTYPES))
        dt = entry.dtype if dtype is None else dtype
        offset = int(self.rng.integers(-1, entry.size + 2))
        shape: tuple[int, ...] | None = None
        if self.chance(0.6):
            remaining = max(entry.nbytes - offset * entry.dtype.itemsize, 0) // dt.itemsize
            count = int(self.rng.integers(0, remaining + 2))  # sometimes one element too many
            shape = (count,)
        self.what = f"view offset={offset} shape={shape} dtype={dtype} of {entry.buf!r}"
        start = offset * entry.dtype.itemsize
        # DeviceBuffer.view's rules, in its order: open; start inside and aligned for the new dtype; the
        # rest a whole number of elements (no shape given) or the shape fits (shape given)
        outside = not 0 <= start <= entry.nbytes or start % dt.itemsize != 0
        if shape is None:
            misfit = (entry.nbytes - start) % dt.itemsize != 0
        else:
            misfit = start + math.prod(shape) * dt.itemsize > entry.nbytes
        predicted: Prediction = ClosedError if entry.closed else (ValueError if outside or misfit else None)
        ok, view = self.attempt(predicted, lambda: entry.buf.view(offset, shape, dtype))
        if ok:
            self.entries.append(Entry(view, entry.root, entry.offset + start))

    def slice_view(self, entry: Entry) -> None:
        first = entry.shape[0]
        start, stop = int(self.rng.integers(-2, first + 3)), int(self.rng.integers(-2, first + 3))
        step = 2 if self.chance(0.1) else 1
        self.what = f"view [{start}:{stop}:{step}] of {entry.buf!r}"
        begin = slice(start, stop, step).indices(first)[0]
        predicted: Prediction = ValueError if step != 1 else (ClosedError if entry.closed else None)
        ok, view = self.attempt(predicted, lambda: entry.buf[start:stop:step])
        if ok:
            row_bytes = math.prod(entry.shape[1:]) * entry.dtype.itemsize
            self.entries.append(Entry(view, entry.root, entry.offset + begin * row_bytes))

    def mismatched_host(self, entry: Entry) -> tuple[np.ndarray, Prediction]:
        """A host array for ``entry``: usually matching, sometimes of the wrong dtype or shape."""
        if self.chance(0.15):
            other = np.float64 if entry.dtype != np.float64 else np.float32
            return self.random_values(entry.shape, other), TypeError
        if self.chance(0.15):
            return self.random_values((entry.size + 1,), entry.dtype), ValueError
        return self.random_values(entry.shape, entry.dtype), None

    def host_to_device(self) -> None:
        entry = self.any_entry()
        host, predicted = self.mismatched_host(entry)
        source: Any = host
        kind = "pageable"
        if predicted is None and host.ndim and self.chance(0.2):  # a strided source: rawcuda copies it densely
            doubled = np.repeat(host, 2, axis=-1)
            source, kind = doubled[..., ::2], "strided"
        elif self.chance(0.3):
            source, kind = PinnedBuffer.from_array(host), "pinned"
        on = self.on()
        predicted = ClosedError if entry.closed else predicted
        self.what = f"copy_from {kind} {host.shape} {host.dtype} stream={on is not None} into {entry.buf!r}"
        try:
            ok, _ = self.attempt(predicted, lambda: entry.buf.copy_from(source, stream=on))
            if on is not None:
                self.stream.synchronize()  # before a pinned source is closed
        finally:
            if isinstance(source, PinnedBuffer):
                source.close()
        if ok:
            entry.write(host)

    def device_to_host(self) -> None:
        entry = self.any_entry()
        on = self.on()
        if self.chance(0.25):
            host, predicted = self.mismatched_host(entry)
            out = np.empty_like(host)
            predicted = ClosedError if entry.closed else predicted
            self.what = f"copy_to {out.shape} {out.dtype} stream={on is not None} from {entry.buf!r}"

            def copy() -> np.ndarray:
                entry.buf.copy_to(out, stream=on)
                if on is not None:
                    self.stream.synchronize()
                return out

            ok, got = self.attempt(predicted, copy)
        else:
            self.what = f"to_array stream={on is not None} from {entry.buf!r}"
            ok, got = self.attempt(ClosedError if entry.closed else None, lambda: entry.buf.to_array(stream=on))
        if ok:
            self.compare(entry, got)

    def device_to_device(self) -> None:
        dst = self.any_entry()
        if self.chance(0.7) and not dst.closed:  # usually a source that fits
            src = self.pick(
                [e for e in self.entries if e.dtype == dst.dtype and e.shape == dst.shape and not e.overlaps(dst)]
                or [self.new_entry(dst.shape, dst.dtype, "from_array")]
            )
        else:
            src = self.any_entry()
        if src.overlaps(dst):  # cuMemcpyDtoD has memcpy's rule: no overlapping ranges
            src = self.new_entry(dst.shape, dst.dtype, "from_array")
        predicted: Prediction = None
        if dst.closed or src.closed:
            predicted = ClosedError
        elif src.dtype != dst.dtype:
            predicted = TypeError
        elif src.shape != dst.shape:
            predicted = ValueError
        on = self.on()
        self.what = f"copy_from device {src.buf!r} stream={on is not None} into {dst.buf!r}"
        ok, _ = self.attempt(predicted, lambda: dst.buf.copy_from(src.buf, stream=on))
        if ok:
            dst.write(*src.values())

    def fill(self) -> None:
        entry = self.any_entry()
        dt = entry.dtype
        predicted: Prediction = None
        value: Any
        if self.chance(0.15):
            value, predicted = (1.5 if dt.kind in "iu" else 1 + 2j), TypeError  # lossy: refused
        elif dt.kind == "f":
            value = self.pick((0.0, -1.5, 2.75, 1e-3, float("nan"), -0.0))
        elif dt.kind == "u":
            value = dt.type(self.rng.integers(0, np.iinfo(dt).max, endpoint=True))  # numpy scalar: exact dtype
        else:
            info = np.iinfo(dt)
            value = int(self.rng.integers(info.min, info.max, endpoint=True))
        predicted = ClosedError if entry.closed else predicted
        on = self.on()
        self.what = f"fill {value!r} stream={on is not None} into {entry.buf!r}"
        ok, _ = self.attempt(predicted, lambda: entry.buf.fill(value, stream=on))
        if ok:
            entry.write(np.asarray(value).astype(dt))

    def memset(self) -> None:
        entry = self.any_entry()
        byte = self.pick((0, 1, 0x7F, 0xFF, 256, -1))
        on = self.on()
        self.what = f"memset {byte} stream={on is not None} into {entry.buf!r}"
        # memset checks its value before anything else: 256 is refused even on a closed buffer
        predicted: Prediction = ValueError if not 0 <= byte <= 0xFF else (ClosedError if entry.closed else None)
        ok, _ = self.attempt(predicted, lambda: entry.buf.memset(byte, stream=on))
        if ok:
            entry.write(np.full(entry.nbytes, byte, np.uint8).view(entry.dtype).reshape(entry.shape))

    def close(self) -> None:
        entry = self.any_entry()
        self.what = f"close {entry.buf!r}"
        self.attempt(None, entry.buf.close)
        self.attempt(None, entry.buf.close)  # a second close is silent
        if entry.buf._base is None:
            entry.root.closed = True  # a buffer takes its views with it
        else:
            entry.closed_self = True  # a view closes alone

    # --- kernels -------------------------------------------------------------------------------------------------
    def corrupt(self, operands: list[Entry]) -> list[Entry]:
        """Sometimes swap one operand for any entry: closed, the wrong dtype, the wrong size..."""
        if self.chance(BAD_OPERAND_P):
            operands[int(self.rng.integers(len(operands)))] = self.any_entry()
        return operands

    def kernel_prediction(self, operands: list[Entry], shapes_ok: bool, launches: bool) -> Prediction:
        """ops.*: dtypes are checked first, then shapes; nothing launches for empty data; closed last."""
        if any(e.dtype != F32 for e in operands):
            return TypeError
        if not shapes_ok:
            return ValueError
        if launches and any(e.closed for e in operands):
            return ClosedError
        return None

    def separate(self, out: Entry, inputs: list[Entry]) -> Entry:
        """An output that overlaps an input is replaced by a fresh one (__restrict__: no aliasing)."""
        if any(out.overlaps(i) for i in inputs):
            return self.new_entry(out.shape, F32, "empty")
        return out

    def launch(self) -> None:
        kind = self.pick(("vector_add", "saxpy", "gelu", "transpose", "bias_relu", "sum", "matmul"))
        getattr(self, "launch_" + kind)()

    def launch_vector_add(self) -> None:
        shape = self.random_shape()
        c, a, b = self.corrupt([self.open_f32(shape), self.open_f32(shape), self.open_f32(shape)])
        n = c.size
        same = len({c.size, a.size, b.size}) == 1
        predicted = self.kernel_prediction([c, a, b], same, launches=same and n > 0)
        if predicted is None:
            c = self.separate(c, [a, b])
        on = self.on()
        self.what = f"vector_add {c.buf!r} = {a.buf!r} + {b.buf!r} stream={on is not None}"
        ok, _ = self.attempt(predicted, lambda: ops.vector_add(c.buf, a.buf, b.buf, stream=on))
        if ok and n:
            (av, ak), (bv, bk) = a.values(), b.values()
            with np.errstate(all="ignore"):
                result = av.reshape(-1) + bv.reshape(-1)
            c.write(result.reshape(c.shape), (ak.reshape(-1) & bk.reshape(-1) & ~np.isnan(result)).reshape(c.shape))

    def launch_saxpy(self) -> None:
        shape = self.random_shape()
        y, x = self.corrupt([self.open_f32(shape), self.open_f32(shape)])
        alpha = self.pick(SAXPY_ALPHAS)
        n = y.size
        same = y.size == x.size
        predicted = self.kernel_prediction([y, x], same, launches=same and n > 0)
        if predicted is None:
            y = self.separate(y, [x])
        on = self.on()
        self.what = f"saxpy {y.buf!r} += {alpha} * {x.buf!r} stream={on is not None}"
        ok, _ = self.attempt(predicted, lambda: ops.saxpy(y.buf, alpha, x.buf, stream=on))
        if ok and n:
            (xv, xk), (yv, yk) = x.values(), y.values()
            xv, xk = xv.reshape(y.shape), xk.reshape(y.shape)
            with np.errstate(all="ignore"):
                scaled = np.float32(alpha) * xv
                result = scaled + yv
            # where alpha * x overflowed, the fused multiply-add may still be finite: not modelled
            exact = ~np.isnan(result) & ~(np.isinf(scaled) & np.isfinite(xv))
            y.write(result, xk & yk & exact)

    def launch_gelu(self) -> None:
        shape = self.random_shape()
        out, x = self.corrupt([self.open_f32(shape), self.open_f32(shape)])
        n = out.size
        same = out.size == x.size
        predicted = self.kernel_prediction([out, x], same, launches=same and n > 0)
        if predicted is None:
            out = self.separate(out, [x])
        self.what = f"gelu {out.buf!r} = gelu({x.buf!r})"
        ok, _ = self.attempt(predicted, lambda: ops.gelu(out.buf, x.buf, stream=self.on()))
        if ok and n:
            got = out.buf.to_array()
            xv, xk = x.values()
            x64 = xv.reshape(out.shape).astype(np.float64)
            checked = xk.reshape(out.shape) & np.isfinite(x64) & (np.abs(x64) < GELU_SCALED)
            with np.errstate(all="ignore"):
                expected = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))
            error = np.abs(got.astype(np.float64) - expected)
            assert np.all(error[checked] <= 16 * FLOAT32_EPS * (np.abs(x64[checked]) + 1)), self.what
            out.write(got)  # the model adopts the GPU's (checked) values

    def launch_transpose(self) -> None:
        rows, cols = self.pick(EXTENTS_2D), self.pick(EXTENTS_2D)
        x = self.open_f32((rows, cols))
        out, x = self.corrupt([self.open_f32((cols, rows), avoid=(x,)), x])
        fits = len(x.shape) == 2 and out.shape == x.shape[::-1]
        predicted = self.kernel_prediction([out, x], fits, launches=fits and x.size > 0)
        if predicted is None:
            out = self.separate(out, [x])
        padded = self.chance(0.5)
        self.what = f"transpose padded={padded} {out.buf!r} = {x.buf!r}.T"
        ok, _ = self.attempt(predicted, lambda: ops.transpose(out.buf, x.buf, padded=padded, stream=self.on()))
        if ok and x.size:
            xv, xk = x.values()
            out.write(xv.T, xk.T)

    def launch_bias_relu(self) -> None:
        rows, cols = self.pick(EXTENTS_2D), self.pick(EXTENTS_2D)
        x = self.open_f32((rows, cols))
        bias = self.open_f32((cols,), avoid=(x,))
        out, x, bias = self.corrupt([self.open_f32((rows, cols), avoid=(x, bias)), x, bias])
        fits = len(x.shape) == 2 and out.shape == x.shape and bias.shape == (x.shape[1],)
        predicted = self.kernel_prediction([out, x, bias], fits, launches=fits and x.size > 0)
        if predicted is None:
            out = self.separate(out, [x, bias])
        self.what = f"bias_relu {out.buf!r} = relu({x.buf!r} + {bias.buf!r})"
        ok, _ = self.attempt(predicted, lambda: ops.bias_relu(out.buf, x.buf, bias.buf, stream=self.on()))
        if ok and x.size:
            (xv, xk), (bv, bk) = x.values(), bias.values()
            with np.errstate(all="ignore"):
                v = xv + bv[None, :]
            result = np.where(v > 0, v, np.float32(0))  # fmaxf(NaN, 0) is 0, as here
            out.write(result, xk & bk[None, :] & (v != 0))  # the sign of fmaxf(-0, 0) is not modelled

    def launch_sum(self) -> None:
        x = self.open_f32(self.random_shape()) if self.chance(1 - BAD_OPERAND_P) else self.any_entry()
        predicted: Prediction = TypeError if x.dtype != F32 else (ClosedError if x.closed else None)
        self.what = f"sum of {x.buf!r}"
        ok, total = self.attempt(predicted, lambda: ops.sum(x.buf, stream=self.on()))
        if ok:
            xv, xk = x.values()
            x64 = xv.astype(np.float64)
            if xk.all() and np.isfinite(x64).all() and (np.abs(x64) <= SCALED).all():
                magnitude = float(np.abs(x64).sum())
                tolerance = 8 * FLOAT32_EPS * magnitude * max(1.0, math.log2(max(x.size, 2))) + 1e-30
                assert abs(total - float(x64.sum())) <= tolerance, (self.what, total, float(x64.sum()))

    def launch_matmul(self) -> None:
        m, k, n = self.pick(EXTENTS_2D), self.pick(EXTENTS_2D), self.pick(EXTENTS_2D)
        a = self.open_f32((m, k))
        b = self.open_f32((k, n), avoid=(a,))
        c, a, b = self.corrupt([self.open_f32((m, n), avoid=(a, b)), a, b])
        fits = (
            len(a.shape) == 2
            and len(b.shape) == 2
            and len(c.shape) == 2
            and a.shape[1] == b.shape[0]
            and c.shape == (a.shape[0], b.shape[1])
        )
        launches = fits and c.size > 0
        predicted = self.kernel_prediction([c, a, b], fits, launches)
        if predicted is None:
            c = self.separate(c, [a, b])
        self.what = f"matmul {c.buf!r} = {a.buf!r} @ {b.buf!r}"
        ok, _ = self.attempt(predicted, lambda: ops.matmul(c.buf, a.buf, b.buf, stream=self.on()))
        if ok and launches:
            got = c.buf.to_array()
            (av, ak), (bv, bk) = a.values(), b.values()
            a64, b64 = av.astype(np.float64), bv.astype(np.float64)
            if ak.all() and bk.all() and (np.abs(a64) <= MATMUL_SCALED).all() and (np.abs(b64) <= MATMUL_SCALED).all():
                bound = 2 * max(a.shape[1], 1) * FLOAT32_EPS * (np.abs(a64) @ np.abs(b64)) + 1e-30
                assert np.all(np.abs(got - a64 @ b64) <= bound), self.what
            c.write(got)

    # --- the sequence ----------------------------------------------------------------------------------------
    def audit(self) -> None:
        for entry in self.entries:
            if not entry.closed:
                self.what = f"audit {entry.buf!r}"
                self.compare(entry, entry.buf.to_array())

    def run(self, steps: int) -> None:
        operations: list[tuple[Callable[[], None], int]] = [
            (self.alloc, 3),
            (self.view, 2),
            (self.host_to_device, 3),
            (self.device_to_host, 3),
            (self.device_to_device, 2),
            (self.fill, 2),
            (self.memset, 1),
            (self.close, 1),
            (self.launch, 4),
        ]
        weights = np.array([w for _, w in operations], float)
        for step in range(steps):
            self.step = step
            self.trim()
            operation = operations[int(self.rng.choice(len(operations), p=weights / weights.sum()))][0]
            operation()
            if self.step % AUDIT_EVERY == AUDIT_EVERY - 1:
                self.audit()
        self.audit()

    def close_all(self) -> None:
        for entry in self.entries:
            entry.buf.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_random_sequences_match_the_model(seed: int) -> None:
    ctx = default_context()
    for stem, name in (
        ("vector_add", "vector_add"),
        ("saxpy", "saxpy"),
        ("elementwise", "gelu"),
        ("elementwise", "bias_relu"),
        ("transpose", "transpose_naive"),
        ("transpose", "transpose_padded"),
        ("reduce", "warp_reduce_sum"),
        (sgemm.STEM, ops.MATMUL_KERNEL),
        (sgemm.STEM, ops.MATMUL_ANY_KERNEL),
    ):
        ops.kernel(stem, name, ctx)  # loaded up front, so the memory baseline includes the modules
    gc.collect()
    ctx.synchronize()
    free_before, open_before = ctx.mem_info()[0], Counter(repr(c) for c in ctx.children)
    with Stream() as stream:  # a blocking stream: ordered with the legacy stream that sync calls use
        stress = Stress(seed, ctx, stream)
        try:
            stress.run(STEPS_PER_SEED)
        finally:
            stress.close_all()
    gc.collect()
    ctx.synchronize()
    leaked = Counter(repr(c) for c in ctx.children) - open_before  # (objects of earlier tests may have died)
    assert not leaked, f"objects left open: {sorted(leaked.elements())}"
    assert ctx.mem_info()[0] >= free_before - LEAK_TOLERANCE
    succeeded = {key.split()[0] for key, count in stress.stats.items() if key.endswith(" ok") and count}
    refused = sum(count for key, count in stress.stats.items() if key.endswith(" refused"))
    # The sequence must have exercised both sides: every kind of operation worked, and some were refused.
    expected_kinds = {
        "alloc",
        "view",
        "copy_from",
        "to_array",
        "fill",
        "memset",
        "close",
        "vector_add",
        "saxpy",
        "sum",
        "transpose",
        "bias_relu",
        "gelu",
    }
    assert expected_kinds <= succeeded, (expected_kinds - succeeded, stress.stats)
    assert refused > 0, stress.stats
