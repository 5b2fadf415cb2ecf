"""What the crash scenarios add to the shared `recluster watch` helpers (tests/helpers.py): a watch that marks
its merge phases on disk (tests/reliability/phased_watch.py), the files of ours on disk."""

from __future__ import annotations

import subprocess
from pathlib import Path

from recluster.core.blocks import parse_data_file_name
from tests.helpers import start_watch


def start_phased_watch(table: Path, checkpoint: Path, log: Path, markers: Path, pause: str) -> subprocess.Popen[bytes]:
    """`recluster watch` that touches markers/<phase>-<n> at each merge phase and stops at `pause` until killed."""
    return start_watch(
        [table],
        checkpoint,
        log,
        module="tests.reliability.phased_watch",
        env={"RECLUSTER_TEST_MARKERS": str(markers), "RECLUSTER_TEST_PAUSE": pause},
    )


def our_files_on_disk(table: Path) -> set[str]:
    return {
        str(path.relative_to(table)) for path in table.rglob("*.parquet") if parse_data_file_name(path.name) is not None
    }
