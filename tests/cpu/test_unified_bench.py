"""CPU checks of bench/unified_memory.py's arithmetic: ratios taken cold against cold and warm against warm,
and a verdict computed from the measured numbers, never written in advance (an after-prefetch
figure that compares one cold launch with a warm baseline, under a text fixed in advance, would mislead)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from tests.helpers import ROOT

MIB = 1 << 20
MOVED = 2 * 256 * MIB  # a and b, 256 MiB each


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    path = ROOT / "bench" / "unified_memory.py"
    spec = importlib.util.spec_from_file_location("bench_unified_memory", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def cases(bench: ModuleType, prefetched_cold: float, prefetched_warm: float) -> list[object]:
    case = bench.Case
    return [
        case(bench.BASELINE, "copies", "", [9.7] * 3, [0.25, 0.24, 0.26], [0.20] * 9),
        case("managed, first touch", "", "", [], [60.0, 58.0, 61.0], [0.21] * 9),
        case("managed, prefetched", "prefetch", "", [11.0] * 3, [prefetched_cold] * 3, [prefetched_warm] * 9),
    ]


def test_ratios_are_cold_against_cold_and_warm_against_warm(bench: ModuleType) -> None:
    rows = {row.case: row for row in bench.rows_of(cases(bench, 0.35, 0.22), MOVED)}
    assert rows[bench.BASELINE].cold_vs_explicit == 1.0 and rows[bench.BASELINE].warm_vs_explicit == 1.0
    assert rows["managed, prefetched"].cold_vs_explicit == pytest.approx(0.35 / 0.25)
    assert rows["managed, prefetched"].warm_vs_explicit == pytest.approx(0.22 / 0.20)
    assert rows["managed, first touch"].place_ms is None  # nothing was timed before its launches
    assert rows[bench.BASELINE].place_gb_per_s == pytest.approx(MOVED / 9.7e-3 / 1e9)


def test_the_verdict_follows_the_numbers(bench: ModuleType) -> None:
    inside = bench.verdict({r.case: r for r in bench.rows_of(cases(bench, 0.35, 0.20), MOVED)}, MOVED)
    outside = bench.verdict({r.case: r for r in bench.rows_of(cases(bench, 0.25, 0.20), MOVED)}, MOVED)
    prefetch_line = next(line for line in inside if "after a prefetch" in line)
    assert "1.40x (40% slower)" in prefetch_line and "inside the seed's" in prefetch_line
    prefetch_line = next(line for line in outside if "after a prefetch" in line)
    assert "1.00x (the same within 5%)" in prefetch_line and "outside the seed's" in prefetch_line
