#!/usr/bin/env bash
# `./dev metastore`: the standalone Hive Metastore 3.1.3 for the discovery tests (tests/hive_metastore): its jars and
# their dependencies from Maven Central into $VENV/metastore/jars (tests/hive_metastore/pom.xml; maven from Debian
# when mvn is missing and we are root). Run from the repository's root with VENV set, as ./dev does.
set -euo pipefail
dir="${VENV:-.venv}/metastore"
pom=tests/hive_metastore/pom.xml
if [ ! -f "$dir/.installed" ] || [ "$pom" -nt "$dir/.installed" ]; then
  if ! command -v mvn >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >/dev/null
  fi
  mkdir -p "$dir"
  rm -rf "$dir/jars"
  mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$(cd "$dir" && pwd)/jars"
  touch "$dir/.installed"
fi
