"""The `recluster` command line: parse, run the command, turn user errors into one line and an exit code.

One module per command group (tables, watch, kafka, optimize, demo), the parser and the rendering beside it.
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Sequence

from recluster.cli.common import EXIT_ERROR, EXIT_USAGE, UsageError
from recluster.cli.parser import build_parser
from recluster.core.errors import TableError
from recluster.core.sql_parser import SqlError
from recluster.settings import SettingsError


def main(argv: Sequence[str] | None = None) -> int:
    code = command(argv)
    # The command's frames are gone: what it no longer references is freed now, native threads included, not in the
    # interpreter's teardown, where a C++ thread aborted finished commands now and then ("terminate called without an
    # active exception", exit 134: docs/commands.md#exit-codes).
    gc.collect()
    return code


def command(argv: Sequence[str] | None) -> int:
    """Parse and run one command: its exit code; a user error or a storage error no retry fixed is one line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args))
    except (SettingsError, UsageError, SqlError) as error:
        print(f"recluster: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except TableError as error:
        print(f"recluster: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("recluster: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # a storage error no retry fixed (delta-rs's vacuum, a merge's read): one line too
        from recluster.delta.storage_faults import describe_storage_error, storage_fault

        fault = storage_fault(error)
        if fault is None:
            raise
        print(f"recluster: error: {fault} storage error: {describe_storage_error(error)}", file=sys.stderr)
        return EXIT_ERROR
