"""Graphs: CUDA graphs, captured from a stream or built node by node, instantiated and replayed."""
