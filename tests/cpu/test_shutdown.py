"""The shutdown cases (``SPECS`` in tests/gpu/test_shutdown.py), checked as a sample on any machine.

Running the child processes needs a GPU; whether the seeded sample is deterministic and covers every kind
and ending does not. ``SPECS`` stays next to the test that runs it; importing that module touches no driver.
"""

from __future__ import annotations

from tests.gpu.test_shutdown import ENDINGS, KINDS, SPECS, specs


def test_the_sample_covers_every_kind_and_ending() -> None:
    """Runs without a GPU: the seeded sample is deterministic and covers the whole space."""
    assert len(SPECS) >= 30 and len({s.id for s in SPECS}) == len(SPECS)
    assert {kind for spec in SPECS for kind in spec.order} == set(KINDS)
    assert {spec.ending for spec in SPECS} == set(ENDINGS)
    assert specs() == SPECS  # the same sample every run
