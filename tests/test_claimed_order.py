"""The order a lease pass reads and takes up the tables it claimed (recluster/engine/claimed_order.py): the tables
commit events named first, so that a takeover of thousands of tables serves the ones receiving commits within a
read of their claim (docs/discovery.md#several-jobs). No JVM, no store but the local disk."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake
from hypothesis import given
from hypothesis import strategies as st

from recluster.engine.claimed_order import ClaimedOrder
from recluster.engine.discovery import FoundTable
from recluster.engine.job_discovery import JobDiscovery
from recluster.settings import Settings
from recluster.settings_discovery import DiscoverySettings, LeaseSettings, StorageRoot

MEMORY = 10.0
TABLES = [f"t{index}" for index in range(8)]
before_claim = st.lists(st.tuples(st.sampled_from(TABLES), st.floats(0, 30)), max_size=6)
after_claim = st.lists(st.one_of(st.none(), st.lists(st.sampled_from(TABLES), max_size=3)), max_size=20)


@given(st.lists(st.sampled_from(TABLES), unique=True), before_claim, after_claim)
def test_each_claimed_table_is_taken_once_those_events_named_first(
    claimed: list[str], early: list[tuple[str, float]], steps: list[list[str] | None]
) -> None:
    """Against a brute-force oracle: every claimed table is handed out exactly once; a take hands out a table an
    event named (before the claim within the memory, or since) whenever one is waiting, else the first claimed."""
    order = ClaimedOrder(MEMORY)
    claimed_at = 30.0
    for uri, at in sorted(early, key=lambda ask: ask[1]):
        order.ask([uri], now=at)
    order.claim(claimed, now=claimed_at)
    newest = dict(sorted(early, key=lambda ask: ask[1]))
    asked = {uri for uri, at in newest.items() if claimed_at - at <= MEMORY}
    waiting, taken = list(claimed), []
    for step in [*steps, *[None] * (len(claimed) + 1)]:
        if step is not None:
            order.ask(step, now=claimed_at)
            asked.update(step)
            continue
        handed = order.take()
        if not waiting:
            assert handed is None
            continue
        named = [u for u in waiting if u in asked]
        assert handed in named if named else handed == waiting[0]
        assert handed is not None
        waiting.remove(handed)
        taken.append(handed)
    assert sorted(taken) == sorted(claimed)


def test_a_takeover_takes_up_the_tables_events_named_first(tmp_path: Path) -> None:
    """A job claiming a root's tables reads and takes them up in claim order, except those commit events named: one
    named before the claim (a dead job's table is claimed only once its heartbeat expired) and one named while the
    takeover runs go first."""
    lake = tmp_path / "lake"
    for index in range(6):
        write_deltalake(lake / f"t{index}", pa.table({"k": pa.array([index], pa.int64())}))
    uris = [str(lake / f"t{index}") for index in range(6)]
    leases = LeaseSettings(root=str(tmp_path / "leases"), ttl_seconds=4, renew_seconds=2)
    root = StorageRoot(uri=str(lake), max_depth=1, properties={"recluster.clusterBy": "k"})
    settings = Settings(discovery=DiscoverySettings(roots=[root], leases=leases, threads=1))
    taken_up: list[str] = []

    def take_up(table: FoundTable) -> int:
        taken_up.append(table.uri)
        if len(taken_up) == 2:  # an event for a table still waiting, seen by a micro-batch meanwhile
            discovery.ask([uris[3], str(tmp_path / "elsewhere")])
        return 0

    discovery = JobDiscovery(settings, None, frozenset(), take_up, lambda uri: None, None)
    discovery.ask([uris[5]])
    assert discovery.leases is not None
    discovery.leases.beat()
    discovery.run_pass()
    assert taken_up == [uris[5], uris[0], uris[3], uris[1], uris[2], uris[4]]
    assert set(discovery.found_by) == set(uris)
