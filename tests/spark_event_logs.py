"""Spark applications that write event logs, run by the referee's Python (Delta Spark): `python spark_event_logs.py
JARS SPEC.json`. SPEC is a list of applications, each `{"conf": {...}, "sql": [...]}`: one Spark session per
application, its statements run in order (queries collected), then stopped so its event log is complete."""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "referee"))

from server import session  # the referee's own session builder, beside it


def main() -> None:
    with open(sys.argv[2], encoding="utf-8") as spec_file:
        jars, spec = sys.argv[1], json.load(spec_file)
    for application in spec:
        os.environ["REFEREE_CONF"] = json.dumps({"spark.eventLog.enabled": "true", **application["conf"]})
        spark = session(jars)
        for statement in application["sql"]:
            spark.sql(statement).collect()
        spark.stop()


if __name__ == "__main__":
    main()
