"""Tests that need a GPU: tests/conftest.py marks every one ``gpu``; without a usable GPU each is skipped."""
