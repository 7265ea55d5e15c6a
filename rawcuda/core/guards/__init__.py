"""Core guard: the machinery that keeps the textbook right beside other libraries, other threads and the GC.

Each guard answers a failure seen on a real GPU. Core calls them only at a few named points
(docs/architecture.md, "The guard seam"). Skip this folder on a first read.

docs/hazards.md, "Hazards: what rawcuda guards against, and why"
"""
