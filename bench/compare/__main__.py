"""`python -m bench.compare [--quick] [--suite anchors|absorb] [--only ...] [--strategies ...] [--report FILE]`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import bench.compare
from bench.compare import main, main_absorb, render, render_absorb


def cli() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compare", description=(bench.compare.__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="30 x 10,000-row appends (target 100,000) instead of 60 x 50,000 (target 1,000,000)",
    )
    parser.add_argument("--only", nargs="*", default=(), help="workloads to run (name prefixes: a b c d)")
    parser.add_argument("--strategies", nargs="*", default=(), help="strategies to run (default: all)")
    parser.add_argument("--report", type=Path, help="print the tables of a stored result JSON; runs nothing")
    parser.add_argument(
        "--suite",
        choices=["anchors", "absorb"],
        default="anchors",
        help="anchors: every strategy on workloads a-d; absorb: issue 11's workloads (--only takes case names)",
    )
    args = parser.parse_args()
    if args.report:
        stored = json.loads(args.report.read_text(encoding="utf-8"))
        (render_absorb if stored.get("benchmark") == "absorb" else render)(stored, args.report)
    elif args.suite == "absorb":
        main_absorb(quick=args.quick, only=args.only)
    else:
        main(quick=args.quick, only=args.only, strategies=args.strategies)


if __name__ == "__main__":
    cli()
