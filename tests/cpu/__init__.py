"""Tests that need no GPU: they run everywhere, CI included (and on a GPU host too)."""
