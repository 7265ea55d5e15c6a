"""CI runs exactly what the README says: its install lines (a virtual environment first) and its test command.

A newcomer pastes the README; if CI ran something else, CI would prove nothing about what they paste.
"""

from __future__ import annotations

import re

from tests.helpers import ROOT


def readme_block(after: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index(after)
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S)
    assert block is not None, f"no bash block after {after!r}"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_ci_runs_the_readme_install_and_test_commands_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    install = readme_block("Install (from a checkout")
    test = readme_block("\nTest:")
    assert install[0].startswith("python3 -m venv .venv"), "the README installs into a virtual environment"
    for line in install + test:
        assert line in ci, f".ci/run does not run the README's {line!r}"
    assert ci.index(install[-1]) < ci.index(test[0]), "install before test"


def test_the_virtual_environment_is_not_committed() -> None:
    assert ".venv/" in (ROOT / ".gitignore").read_text().splitlines()
