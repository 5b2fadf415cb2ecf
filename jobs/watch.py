"""Entry file for spark-submit and the Spark operator (`mainApplicationFile`): `recluster watch ARGS...`.

The Deployment runs `recluster watch` directly (it is the driver in client mode); under spark-submit in
cluster mode Spark starts the driver JVM first and runs this file in it, and `recluster.spark.session.spark_session`
then joins that JVM instead of launching one.
"""

from __future__ import annotations

import sys

from recluster.cli import main

if __name__ == "__main__":
    sys.exit(main(["watch", *sys.argv[1:]]))
