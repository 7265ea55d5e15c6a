"""Extras: built on core -- asyncio waits, managed and growable memory, NVRTC, adopting foreign arrays."""
