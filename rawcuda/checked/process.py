"""Layer 1: what this process has done with CUDA -- initialized it? inherited it through ``fork()``? --
and the switches it was started with (``RAWCUDA_TRACE=1``, ``RAWCUDA_SYNC_LAUNCHES=1``).

Two facts, each needed by more than one file, so they live in one place with no imports of their own:

* **initialized**: ``cuInit(0)`` must precede every other driver call, and once per process is enough;
  :func:`rawcuda.checked.init` records it here.
* **forked**: ``fork()`` copies the parent's memory but not its CUDA state, so in a child forked after
  the parent initialized CUDA every driver call fails (or, worse, misbehaves). The hook below notes the
  parent's pid in every forked child, so that errors can say why -- and how to fix it (use ``spawn``).
"""

from __future__ import annotations

import os


class _State:
    initialized_pid: int | None = None  # the pid that ran cuInit, or None
    forked_from: int | None = None  # in a child forked after CUDA was initialized: the parent's pid


_state = _State()


def mark_initialized() -> None:
    """Record that ``cuInit`` succeeded in this process."""
    _state.initialized_pid = os.getpid()


def initialized() -> bool:
    """True once ``cuInit`` has succeeded in *this* process (not inherited from a parent)."""
    return _state.initialized_pid == os.getpid()


def forked_from() -> int | None:
    """The parent's pid when this process was forked after the parent initialized CUDA, else None."""
    return _state.forked_from


#: What turns a switch off: "RAWCUDA_TRACE=0" (or false, no, off, or empty) must not turn tracing on.
OFF_WORDS = frozenset({"", "0", "false", "no", "off"})


def env_flag(name: str) -> bool:
    """True when the environment variable ``name`` is set to anything but an "off" word (any case)."""
    return os.environ.get(name, "").strip().lower() not in OFF_WORDS


def _after_fork_in_child() -> None:
    if _state.initialized_pid is not None:
        _state.forked_from = _state.initialized_pid


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["OFF_WORDS", "env_flag", "forked_from", "initialized", "mark_initialized"]
