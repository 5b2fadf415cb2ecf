# recluster: the streaming job's image, for the driver (ENTRYPOINT `recluster watch`) and the executors
# (their pod template runs /usr/local/bin/spark-entrypoint). Spark is pyspark's own distribution.
#   docker build -t registry.example.com/recluster:0.1.0 .
# Pinned to bookworm: its openjdk-17 packages are installed below (newer Debian releases move to newer JDKs).
# BASE is any Debian bookworm image with Python 3.11 at /usr/local (the official one, or a mirror of it in your
# registry); the local cluster builds one from Debian's packages (docs/kubernetes.md#a-local-cluster).
ARG BASE=python:3.11-slim-bookworm

# pyproject.toml's dependency list alone: the layer that installs it (pyspark and its jars are most of the image) is
# rebuilt only when the list changes, not on every change of the code or of pyproject.toml.
FROM ${BASE} AS requirements
COPY pyproject.toml /tmp/
RUN python3 -c 'import tomllib; print("\n".join(tomllib.load(open("/tmp/pyproject.toml", "rb"))["project"]["dependencies"]))' \
    > /tmp/requirements.txt

FROM ${BASE}

ARG DEBIAN_FRONTEND=noninteractive
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java

RUN groupadd --gid 10001 recluster \
    && useradd --uid 10001 --gid 10001 --home-dir /home/recluster --create-home --shell /usr/sbin/nologin recluster

ENV JAVA_HOME=/opt/java \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYSPARK_PYTHON=python3 \
    PYSPARK_DRIVER_PYTHON=python3 \
    SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark

WORKDIR /opt/recluster
COPY --from=requirements /tmp/requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir -r /tmp/requirements.txt && rm /tmp/requirements.txt
COPY . /opt/recluster
RUN pip install --no-cache-dir . \
    && test -d "$SPARK_HOME/jars" \
    && install -m 0755 docker/spark-entrypoint.sh /usr/local/bin/spark-entrypoint \
    && recluster watch --help > /dev/null

USER 10001:10001

# http (/healthz, /readyz, /metrics, /status), Spark driver RPC, driver block manager
EXPOSE 8080 7078 7079

ENTRYPOINT ["recluster", "watch", "--config", "/etc/recluster/config.yaml"]
