"""Core: the textbook -- devices, contexts, streams, events, buffers, kernels and their launch.

Read it top to bottom: device, context, stream, event, devicebuffer, ptx, paramspec, kernelargs,
launchconfig, function, module. The safety machinery sits in ``core/guards/``. It keeps the textbook right
beside other libraries and the garbage collector. Core reaches it through a short list of calls
(docs/architecture.md, "The guard seam"). Importing this package imports nothing.
"""
