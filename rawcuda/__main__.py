"""Tools entry point: ``python -m rawcuda doctor`` (what this machine offers, what to fix) and ``... demo``."""

from __future__ import annotations

import argparse
import sys

from .tools import demo, doctor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rawcuda", description=__doc__)
    parser.add_argument("command", choices=["doctor", "demo"], help="doctor: check the setup; demo: run vector add")
    args = parser.parse_args(argv)
    return doctor.main() if args.command == "doctor" else demo.main()


if __name__ == "__main__":
    sys.exit(main())
