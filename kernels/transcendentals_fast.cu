// rawcuda-build: fast_math
//
// transcendentals_fast.cu -- kernels/transcendentals.cu compiled with --use_fast_math.
//
// The first line asks rawcuda's kernel build (rawcuda/tools/kernelbuild.py) to add the flag for this
// source alone; the manifest records "fast_math": true for it. Everything else is the included file, so
// rawcuda.kernels' "transcendentals" and "transcendentals_fast" modules hold the same kernels, by the
// same names, built two ways.

#include "transcendentals.cu"
