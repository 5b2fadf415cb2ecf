"""`recluster watch` that marks its merge phases on disk, for the crash tests to kill it at a chosen point.

`python -m tests.reliability.phased_watch WATCH_ARGS...` with RECLUSTER_TEST_MARKERS=DIR: touches
DIR/<phase>-<n> when a merge starts (`merge`), before its commit (`before_commit`) and after it (`after_commit`);
with RECLUSTER_TEST_PAUSE=<phase> it stops there until killed, so the kill lands exactly at that point.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any

import recluster.engine.rounds
from recluster.cli import main

MARKERS = Path(os.environ["RECLUSTER_TEST_MARKERS"])
PAUSE = os.environ.get("RECLUSTER_TEST_PAUSE", "")
_sequence = itertools.count()


def mark(phase: str) -> None:
    (MARKERS / f"{phase}-{next(_sequence)}").touch()
    if phase == PAUSE:
        time.sleep(3600)


def _marked(phase_before: str, phase_after: str | None, function: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        mark(phase_before)
        result = function(*args, **kwargs)
        if phase_after:
            mark(phase_after)
        return result

    return wrapper


recluster.engine.rounds.write_task = _marked("merge", None, recluster.engine.rounds.write_task)
recluster.engine.rounds.commit_task = _marked("before_commit", "after_commit", recluster.engine.rounds.commit_task)

if __name__ == "__main__":
    sys.exit(main(["watch", *sys.argv[1:]]))
