"""The test suite: tests/cpu/ (no GPU needed), tests/gpu/ (marked ``gpu``), shared parts in conftest.py and helpers.py.

A package, so that a CPU and a GPU test file may share a name (tests/cpu/test_graph.py, tests/gpu/test_graph.py).
"""
