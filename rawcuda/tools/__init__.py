"""Tool package: programs built on rawcuda, outside its layers (they may import any of them).

``cheader`` reads cuda.h as a C compiler would and ``headercheck`` proves the declaration tables against it;
``nvcc`` and ``kernelbuild`` turn ``kernels/*.cu`` into the PTX the package ships (``build.py`` is their
command line), and ``reproducible`` keeps every path out of that PTX; ``doctor`` and ``demo`` are
``python -m rawcuda doctor`` and ``python -m rawcuda demo``; ``cli`` is how each of these command lines ends
on Ctrl-C or a closed pipe (one line, no traceback).
"""
