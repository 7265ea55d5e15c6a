"""Tools entry point: ``python -m rawcuda doctor`` (what this machine offers, what to fix) and ``... demo``.

Either ends through :func:`rawcuda.tools.cli.run`: Ctrl-C and ``| head`` end it in one line, not a traceback.
"""

from __future__ import annotations

import argparse

from .tools import cli, demo, doctor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rawcuda", description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("command", choices=["doctor", "demo"], help="doctor: check the setup; demo: run vector add")
    args = parser.parse_args(argv)
    return doctor.main() if args.command == "doctor" else demo.main()


if __name__ == "__main__":
    cli.run(main)
