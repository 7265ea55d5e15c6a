"""Core: the close counter -- one integer that moves whenever any rawcuda object closes.

A launch cache remembers the count it checked its arguments at. Comparing one integer then tells it
that no buffer or stream it packed has closed since.
"""

from __future__ import annotations


class CloseCounter:
    """Counts every close() in the process.

    A launch cache remembers the count it checked its arguments at. While the count is unchanged, no buffer
    it packed has been closed since.
    """

    __slots__ = ("generation",)

    def __init__(self) -> None:
        self.generation = 0


#: The one counter: ``closes.generation`` changes whenever any Resource closes.
closes = CloseCounter()
