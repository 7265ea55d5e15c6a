#!/usr/bin/env bash
# compute-sanitizer over rawcuda: memcheck on every tutorial and on a kernel workload, racecheck on the
# kernels that share memory between threads (the warp-shuffle reduction, the tiled transposes, the
# steps of the reduction progression, and every SGEMM kernel of kernels/sgemm.cu, which memcheck runs too).
#
# Usage, from the repository root:
#   bash tests/sanitizer/run_sanitizer.sh            # the full run
#   bash tests/sanitizer/run_sanitizer.sh --short    # tutorial 01 + the kernel workload + racecheck on the
#                                                    # reduction and the SGEMM kernels: what
#                                                    # tests/gpu/test_sanitizer.py runs
#
# Environment:
#   COMPUTE_SANITIZER   the tool (default: compute-sanitizer on PATH, else /usr/local/cuda/bin/compute-sanitizer)
#   PYTHON              the interpreter (default: python3)
#   SANITIZER_LOG_DIR   where each run's full log is kept (default: a new temporary directory, printed)
#   SANITIZER_EXCLUDE   more tutorial file names to skip, space-separated
#
# Output: one line per run, then "sanitizer: N runs, E errors". Exit status 0 when every run is clean, 1 when
# the sanitizer reported errors, 2 when compute-sanitizer is missing, 3 when the sanitizer was clean but a
# program failed under it (its own checks, e.g. a timing claim that instrumentation made false: see its log).
#
# How a run is judged:
#   * errors = the "ERROR SUMMARY" count (racecheck: the errors of its "RACECHECK SUMMARY"); a log without a
#     summary means the tool or the program died, and counts as one error;
#   * CUDA_ERROR_NOT_READY is a status (cuStreamQuery/cuEventQuery: "not finished yet"), not a failure; if
#     the sanitizer lists such calls they are shown and not counted;
#   * the program itself must also succeed (its success line must be in the log).
# Tutorials run with --report-api-errors no: several provoke failing driver calls on purpose (05, 07, 09 ...),
# and rawcuda turns every failing call into an exception anyway, so one they did not expect fails the
# tutorial. The kernel workload makes no call that should fail, so it keeps API-error reporting on.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 2

MODE=full
case "${1:-}" in
    "") ;;
    --short) MODE=short ;;
    *) echo "usage: bash tests/sanitizer/run_sanitizer.sh [--short]" >&2; exit 2 ;;
esac

SANITIZER="${COMPUTE_SANITIZER:-}"
if [[ -z "$SANITIZER" ]]; then
    SANITIZER="$(command -v compute-sanitizer || true)"
fi
if [[ -z "$SANITIZER" && -x /usr/local/cuda/bin/compute-sanitizer ]]; then
    SANITIZER=/usr/local/cuda/bin/compute-sanitizer
fi
if [[ -z "$SANITIZER" || ! -x "$SANITIZER" ]]; then
    echo "sanitizer: compute-sanitizer not found (not on PATH, not /usr/local/cuda/bin/compute-sanitizer);" \
         "install the CUDA toolkit or set COMPUTE_SANITIZER"
    exit 2
fi
PYTHON="${PYTHON:-python3}"
LOG_DIR="${SANITIZER_LOG_DIR:-$(mktemp -d -t rawcuda-sanitizer.XXXXXX)}"
mkdir -p "$LOG_DIR"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# Tutorials that fault on purpose. 05f launches a kernel that writes to an illegal address, in a child
# process; the sanitizer follows child processes and would (rightly) report it. 14 times 2048^3 products
# of every SGEMM step, which instrumentation makes minutes long; its kernels run under memcheck and
# racecheck here in "workload sgemm", on shapes that reach every edge.
EXCLUDED=" 05f_sticky_errors.py 14_sgemm_progression.py ${SANITIZER_EXCLUDE:-} "

TUTORIAL_MARKER="every step verified"
WORKLOAD_MARKER="^sanitizer-workload: .* checks verified"
WORKLOAD="tests/sanitizer/workload.py"

runs=0
errors=0
failed_programs=0

# run NAME TOOL SUCCESS-REGEX [SANITIZER-OPTION ...] -- COMMAND ...
run() {
    local name=$1 tool=$2 marker=$3
    shift 3
    local options=()
    while [[ $# -gt 0 && $1 != "--" ]]; do
        options+=("$1")
        shift
    done
    shift
    local slug=${name#tutorials/}
    local log="$LOG_DIR/${tool}-${slug//[^A-Za-z0-9_.-]/_}.log"
    local began=$SECONDS
    "$SANITIZER" --tool "$tool" --error-exitcode 1 ${options[@]+"${options[@]}"} "$@" >"$log" 2>&1
    local status=$?
    local seconds=$((SECONDS - began))

    local reported not_ready counted note=""
    reported=$(sed -n 's/.*ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p' "$log" | tail -n 1)
    if [[ -z "$reported" ]]; then
        reported=$(sed -n 's/.*RACECHECK SUMMARY: .*(\([0-9][0-9]*\) error.*/\1/p' "$log" | tail -n 1)
    fi
    not_ready=$(grep -c "Program hit CUDA_ERROR_NOT_READY" "$log")
    if [[ -z "$reported" ]]; then
        counted=1
        note="; no sanitizer summary in the log (did the tool or the program crash?)"
    else
        counted=$((reported - not_ready))
        if ((counted < 0)); then counted=0; fi
        if ((not_ready > 0)); then note="; $not_ready CUDA_ERROR_NOT_READY status(es) not counted"; fi
    fi
    if ! grep -Eq "$marker" "$log"; then
        failed_programs=$((failed_programs + 1))
        note="$note; the program failed (exit $status): $(grep -m 1 -E '^(FAILED|Traceback)' "$log" || echo 'see the log')"
    fi
    runs=$((runs + 1))
    errors=$((errors + counted))
    printf 'sanitizer: %-9s %-40s %3d error(s)  exit %d, %ds%s\n' "$tool" "$name" "$counted" "$status" \
        "$seconds" "$note"
}

echo "sanitizer: $SANITIZER ($("$SANITIZER" --version 2>/dev/null | grep -m 1 -i version)); logs in $LOG_DIR"

if [[ $MODE == short ]]; then
    run tutorials/01_raw_vector_add.py memcheck "$TUTORIAL_MARKER" --report-api-errors no -- \
        "$PYTHON" tutorials/01_raw_vector_add.py
    run "workload kernels --short" memcheck "$WORKLOAD_MARKER" -- "$PYTHON" "$WORKLOAD" kernels --short
    run "workload reduce --short" racecheck "$WORKLOAD_MARKER" -- "$PYTHON" "$WORKLOAD" reduce --short
    run "workload sgemm --short" racecheck "$WORKLOAD_MARKER" -- "$PYTHON" "$WORKLOAD" sgemm --short
else
    for tutorial in tutorials/[0-9][0-9]*_*.py; do  # NN_name.py and the lettered parts NNa_name.py
        if [[ $EXCLUDED == *" $(basename "$tutorial") "* ]]; then
            echo "sanitizer: skipped   $tutorial (excluded: it faults on purpose, or SANITIZER_EXCLUDE)"
            continue
        fi
        run "$tutorial" memcheck "$TUTORIAL_MARKER" --report-api-errors no -- "$PYTHON" "$tutorial"
    done
    run "workload kernels" memcheck "$WORKLOAD_MARKER" -- "$PYTHON" "$WORKLOAD" kernels
    run "workload reduce" racecheck "$WORKLOAD_MARKER" -- "$PYTHON" "$WORKLOAD" reduce
    run "workload transpose" racecheck "$WORKLOAD_MARKER" -- "$PYTHON" "$WORKLOAD" transpose
    run "workload steps" racecheck "$WORKLOAD_MARKER" -- "$PYTHON" "$WORKLOAD" steps
    run "workload sgemm" memcheck "$WORKLOAD_MARKER" -- "$PYTHON" "$WORKLOAD" sgemm
    run "workload sgemm" racecheck "$WORKLOAD_MARKER" -- "$PYTHON" "$WORKLOAD" sgemm
fi

summary="sanitizer: $runs runs, $errors errors"
if ((failed_programs > 0)); then
    summary="$summary ($failed_programs program(s) failed under the sanitizer: see the lines above)"
fi
echo "$summary"
if ((errors > 0)); then
    exit 1
fi
if ((failed_programs > 0)); then
    exit 3
fi
exit 0
