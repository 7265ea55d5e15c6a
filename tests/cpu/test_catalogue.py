"""The catalogue of bad inputs (``CASES`` in tests/gpu/test_catalogue.py), checked as a table on any machine.

Running the cases needs a GPU; whether the table is well formed does not. ``CASES`` stays next to the test
that runs it; importing that module touches no driver.
"""

from __future__ import annotations

import re

from tests.gpu.test_catalogue import CASES, WronglyRefusedError


def test_the_catalogue_is_well_formed() -> None:
    """Runs without a GPU: enough distinct cases, each with a problem and a fix it can be checked against."""
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    refused = [case for case in CASES if case.error is not None]
    assert len(refused) >= 40, len(refused)
    for case in refused:
        assert case.problem and case.fix, case.id
        re.compile(case.pattern)  # both regexes are valid, alone and combined
    for case in CASES:
        if case.gap is not None:  # a refusal gap needs an expected error; a wrongly refused input needs none
            assert case.gap.proposal and (case.error is None) == (case.gap.failure is WronglyRefusedError), case.id
