"""The order in which a lease pass reads and takes up the tables it just claimed (docs/discovery.md#several-jobs): a
table a commit event named goes first, the others in the order they were claimed. A takeover of thousands of tables
takes minutes on a slow store; a table receiving commits is served within a read of its claim."""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterable


class ClaimedOrder:
    """The claimed tables not yet handed to a reader, and the tables commit events named lately that the job did not
    serve. Thread-safe: the discovery thread claims, its readers take, the micro-batches ask."""

    def __init__(self, memory_seconds: float) -> None:
        """`memory_seconds`: how long an event's table is remembered. The events of a dead job's tables come before
        its tables are claimed (its heartbeat has to expire first): they are remembered for at least that long."""
        self.memory_seconds = memory_seconds
        self.lock = threading.Lock()
        self.waiting: dict[str, None] = {}
        """The claimed tables no reader took yet, in claim order (a dict keeps it)."""
        self.first: dict[str, None] = {}
        """The waiting tables an event named, in the order they were asked for: read before the others."""
        self.asked: dict[str, float] = {}
        """Tables events named and the job did not serve, with when (time.monotonic()), oldest first."""

    def ask(self, uris: Iterable[str], now: float | None = None) -> None:
        """Tables commit events named that the job does not serve: read first if claimed, or once claimed."""
        now = time.monotonic() if now is None else now
        with self.lock:
            for uri in uris:
                self.asked.pop(uri, None)
                self.asked[uri] = now  # the newest last
                if uri in self.waiting:
                    self.first[uri] = None
            self._forget_before(now - self.memory_seconds)

    def claim(self, uris: Collection[str], now: float | None = None) -> None:
        """A lease pass's claimed tables to read: those events named lately first."""
        with self.lock:
            self._forget_before((time.monotonic() if now is None else now) - self.memory_seconds)
            self.waiting = dict.fromkeys(uris)
            self.first = {uri: None for uri in self.asked if uri in self.waiting}

    def take(self) -> str | None:
        """The next table to read, or None when none is left."""
        with self.lock:
            uri = next(iter(self.first or self.waiting), None)
            if uri is not None:
                self.first.pop(uri, None)
                del self.waiting[uri]
                self.asked.pop(uri, None)
            return uri

    def _forget_before(self, oldest: float) -> None:
        for uri, asked in list(self.asked.items()):  # oldest first
            if asked >= oldest:
                break
            del self.asked[uri]
