"""Core guards: what keeps the textbook right beside other libraries, other threads and the GC.

Each guard answers a failure seen on a real GPU; docs/hazards.md tells each one's story. Core calls
them at a few named points (docs/architecture.md, "The guard seam"); skip this folder on a first read.
"""
