"""Protocols: what a DLPack consumer asks of ``__dlpack__``, checked before anything is lent or waited for.

``__dlpack__(stream=..., max_version=..., dl_device=..., copy=...)``: each argument is a request the producer
(rawcuda.protocols.dlpack) must grant or refuse, and the array API standard says how to refuse -- ``BufferError`` for
an export that cannot be made as asked, ``TypeError``/``ValueError`` for a malformed argument. Turning the
four into one :class:`Plan` here, with no driver call, keeps the refusals in one place and testable on any
machine.

The stream is the delicate one: a number that the producer will hand to ``cuStreamWaitEvent``, and the
driver reads it as a pointer. 1, 2 and -1 are names, not pointers; anything else must at least point at
memory this process can read (rawcuda.protocols.hostmap), or the process would die in the driver instead of
raising here.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

from rawcuda.ffi.constants import ADDRESS_LIMIT

from .dlpackabi import STREAM_AMBIGUOUS, STREAM_LEGACY, STREAM_NO_SYNC, VERSIONED_MAJOR, DLDeviceType
from .hostmap import is_bad_stream

#: The consumer is the host: it has no stream, so the producer waits (a Plan.sync value).
HOST = "host"


@dataclass(frozen=True)
class Plan:
    """What one ``__dlpack__`` call will do: which struct, which device in it, and how to synchronize
    (None: not at all; HOST: the host waits; an int: that consumer stream waits on the GPU)."""

    versioned: bool
    device: tuple[int, int]
    sync: int | str | None


def negotiate(
    kind: DLDeviceType,
    ordinal: int,
    *,
    stream: Any,
    max_version: Any,
    dl_device: Any,
    copy: Any,
    host_accessible: bool,
) -> Plan:
    """Check ``__dlpack__``'s arguments against a buffer of device ``(kind, ordinal)``; raise what the array
    API standard says: BufferError for an export that cannot be made as asked, TypeError/ValueError for a
    malformed argument."""
    if copy is True:
        raise BufferError(
            "rawcuda exports its memory as it is and never copies (copy=True was asked): copy it yourself "
            "first -- DeviceBuffer.empty(shape, dtype) and copy_from(buf), or to_array() for the host -- and "
            "export the copy"
        )
    if copy is not None and copy is not False:
        raise TypeError(f"copy must be None, True or False, not {copy!r}")
    device = (int(kind), ordinal)
    if dl_device is not None:
        requested = _device_pair(dl_device)
        if requested == (int(DLDeviceType.CPU), 0) and host_accessible:
            device = requested  # the host reads this memory where it is: no copy needed
        elif requested != device:
            where = "the host (kDLCPU) or " if host_accessible else ""
            raise BufferError(
                f"dl_device={requested} asks for a copy on another device; this buffer is on {device} and can be "
                f"exported to {where}{device} only (rawcuda never copies in __dlpack__)"
            )
    return Plan(_versioned(max_version), device, _sync(stream, device[0] == DLDeviceType.CPU, host_accessible))


def _device_pair(dl_device: Any) -> tuple[int, int]:
    pair = int_pair(dl_device)
    if pair is None:
        raise TypeError(f"dl_device must be a (device_type, device_id) pair of ints, not {dl_device!r}")
    return pair


def _versioned(max_version: Any) -> bool:
    if max_version is None:
        return False  # a consumer from before DLPack 1.0: the legacy struct and name
    pair = int_pair(max_version)
    if pair is None:
        raise TypeError(f"max_version must be None or a (major, minor) pair of ints, not {max_version!r}")
    return pair[0] >= VERSIONED_MAJOR


def int_pair(value: Any) -> tuple[int, int] | None:
    """``value`` as two ints, or None: any integer type (numpy's too), never a bool, a float or a string --
    int() would read 2.7 as 2 and "1" as 1, as the stream check refuses to."""
    try:
        first, second = value
    except (TypeError, ValueError):
        return None
    if any(isinstance(part, bool) or not isinstance(part, numbers.Integral) for part in (first, second)):
        return None
    return int(first), int(second)


def _sync(stream: Any, host_consumer: bool, host_accessible: bool) -> int | str | None:
    if stream is not None:
        # Any integer type (numpy.int64 too, which the CUDA Array Interface accepts), but never a bool
        if isinstance(stream, bool) or not isinstance(stream, numbers.Integral):
            raise TypeError(f"stream must be None or an int (a CUstream, 1, 2 or -1), not {type(stream).__name__}")
        stream = int(stream)
    if host_consumer:
        if stream is not None:
            raise ValueError(f"stream={stream} with dl_device=kDLCPU: the host has no stream; pass stream=None")
        return HOST
    if stream is None:  # "assume the legacy default stream": where the consumer is unknown, the host waits
        return HOST if host_accessible else STREAM_LEGACY
    if stream == STREAM_NO_SYNC:
        return None
    if stream == STREAM_AMBIGUOUS:
        raise ValueError(
            "stream=0 is forbidden by the DLPack protocol (it could mean either default stream): pass 1 for "
            "the legacy default stream, 2 for the per-thread one, or the CUstream itself"
        )
    if not 0 < stream < ADDRESS_LIMIT:
        raise ValueError(f"stream={stream} is not a CUstream handle, 1, 2 or -1")
    if is_bad_stream(stream):
        # (the driver would read the handle as a pointer and crash the process: rawcuda.protocols.hostmap says why)
        raise ValueError(
            f"stream={stream:#x} is no CUstream: this process cannot read memory at that address (a device "
            "pointer, or no pointer at all?); pass the "
            "consumer stream's handle (torch: torch.cuda.current_stream().cuda_stream; CuPy: stream.ptr), 1 "
            "(legacy default stream), 2 (per-thread default stream) or -1 (no synchronization)"
        )
    return stream


__all__ = ["HOST", "Plan", "negotiate"]
