"""Tools entry point: ``python -m rawcuda doctor`` (what this machine offers, what to fix) and ``... demo``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rawcuda", description=__doc__)
    parser.add_argument("command", choices=["doctor", "demo"], help="doctor: check the setup; demo: run vector add")
    args = parser.parse_args(argv)
    if args.command == "doctor":
        from .tools.doctor import main as doctor
        return doctor()
    from .tools.demo import main as demo
    return demo()


if __name__ == "__main__":
    sys.exit(main())
