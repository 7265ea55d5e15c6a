"""Core: the order in which a closing context closes what it still owns -- each before what it uses.

Why a table? Closing a stream waits for its queued work, which may still read events and memory. A graph's
nodes name kernels and buffers. An executable graph uses the graph it was made from. If each class chose its
own place, two of them would sooner or later get it slightly wrong. So every child class names its row here
(``close_order = CloseOrder.STREAM``). :meth:`rawcuda.core.context.Context.close` sorts by it.
"""

from __future__ import annotations

from enum import IntEnum


class CloseOrder(IntEnum):
    """The order in which :meth:`Context.close` closes what it still owns: each before what it uses.

    Lower closes first. Every child class names its row (``close_order = CloseOrder.STREAM``). So no class
    has to know another's place.
    """

    EXECUTABLE_GRAPH = 1  # uses the graph it was instantiated from
    GRAPH = 2  # its nodes refer to kernels (modules) and buffers
    MODULE = 3  # Context.close() synchronized all launches before anything closes
    OTHER = 4  # a child that names no row
    BORROWED_STREAM = 5  # another library's stream, maybe over one of this context's: before those go
    STREAM = 6  # closing waits for its queued work, which may still read events and memory
    EVENT = 7
    DEVICE_MEMORY = 8  # buffers, and views of them (which own nothing)
    GROWABLE_MEMORY = 9  # after the DeviceBuffer views it handed out
    HOST_MEMORY = 10  # async copies from pinned memory have drained with their streams
    MEMORY_POOL = 11  # last: after every buffer that could have come from it
