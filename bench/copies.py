"""Host <-> device copy bandwidth through rawcuda: pinned and pageable, both directions, several sizes.

Each copy is queued on a stream between two CUDA events (median of REPS). The same measurement in C
(bench/c/driver_bench.c) is the reference: rawcuda adds host-side work per call (argument checks, keeping
the host array alive), which must vanish next to the copy itself for anything but tiny sizes.

Usage: python bench/copies.py [--out DIR]   (writes copies.json there)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rawcuda import DeviceBuffer, PinnedBuffer, Stream, time_ms

SIZES = (1 << 20, 16 << 20, 256 << 20)  # 1 MiB, 16 MiB, 256 MiB: the same as the C program
REPS = 11


def gbps(nbytes: int, copy: Callable[[], object], stream: Stream) -> float:
    # REPS is odd, so the rate of the median time is the median of the rates
    return nbytes / (time_ms(copy, reps=REPS, stream=stream).median * 1e-3) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    out_dir = parser.parse_args().out
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng()
    stream = Stream()
    rows = []
    for nbytes in SIZES:
        n = nbytes // 4
        dev = DeviceBuffer.empty(n, np.float32)
        pinned = PinnedBuffer.from_array(rng.standard_normal(n, dtype=np.float32))
        pageable = rng.standard_normal(n, dtype=np.float32)
        rows.append(
            {
                "bytes": nbytes,
                "pinned_htod": gbps(nbytes, lambda d=dev, p=pinned: d.copy_from(p, stream=stream), stream),
                "pinned_dtoh": gbps(nbytes, lambda d=dev, p=pinned: d.copy_to(p, stream=stream), stream),
                "pageable_htod": gbps(nbytes, lambda d=dev, h=pageable: d.copy_from(h, stream=stream), stream),
                "pageable_dtoh": gbps(nbytes, lambda d=dev, h=pageable: d.copy_to(h, stream=stream), stream),
            }
        )
        stream.synchronize()
        dev.close()
        pinned.close()
    (out_dir / "copies.json").write_text(json.dumps({"copies": rows}, indent=2))
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
