"""Import time of rawcuda and its peers: a fresh interpreter for each measurement, median of RUNS.

The time is measured inside the child around the import statement alone (interpreter start-up is the
same for every package and is left out). Packages that are not installed are reported as missing.

Usage: python bench/imports.py [--out DIR]   (writes imports.json there)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = 7
MODULES = ("rawcuda", "numpy", "cuda.bindings.driver", "cuda.core", "cupy", "torch")
#: What parts of rawcuda cost, each from a fresh interpreter (they are not peers: run_all leaves them out there).
PARTS = {
    "from rawcuda import nvrtc": "from rawcuda import nvrtc",  # compiling only: the tables, not the launch stack
    "from rawcuda import DeviceBuffer, Module, Stream": "from rawcuda import DeviceBuffer, Module, Stream",
}
CHILD = "import time; t = time.perf_counter(); {statement}; print((time.perf_counter() - t) * 1000)"


def import_ms(statement: str) -> float | str:
    times = []
    for _ in range(RUNS):
        proc = subprocess.run(
            [sys.executable, "-c", CHILD.format(statement=statement)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        if proc.returncode != 0:
            return f"unavailable: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'failed'}"
        times.append(float(proc.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    out_dir = parser.parse_args().out
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {module: import_ms(f"import {module}") for module in MODULES}
    results |= {label: import_ms(statement) for label, statement in PARTS.items()}
    (out_dir / "imports.json").write_text(json.dumps({"import_ms": results, "runs": RUNS}, indent=2))
    for module, ms in results.items():
        print(f"{module:48} {ms if isinstance(ms, str) else f'{ms:8.1f} ms'}")


if __name__ == "__main__":
    main()
