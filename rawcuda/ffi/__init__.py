"""Layer 0: the foreign-function interface -- declarations only, no behaviour.

``library`` finds and opens libcuda (lazily); ``types`` spells cuda.h's C types in ctypes; ``constants``
and ``results`` name every number rawcuda sends or receives; ``table`` is the declaration table itself;
``cheader`` and ``headercheck`` read cuda.h and prove the table against it.
"""
