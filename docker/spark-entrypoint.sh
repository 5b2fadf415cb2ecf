#!/bin/bash
# Spark-on-Kubernetes launcher of the recluster image, for pods that Spark itself creates.
#
# The image's ENTRYPOINT is `recluster watch` (the driver of the Deployment, client mode). Executor pods (and the
# driver pod of a cluster-mode submission, e.g. by the Spark operator) name this script as their command in
# their pod template; Spark passes `executor` or `driver ...` as arguments and the rest through environment
# variables (SPARK_DRIVER_URL, SPARK_EXECUTOR_ID, SPARK_JAVA_OPT_<n>, ...). Spark is pyspark's own
# distribution ($SPARK_HOME), Python is the image's python3 with recluster installed.
set -euo pipefail

: "${SPARK_HOME:?SPARK_HOME must point at the pyspark installation}"
classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$SPARK_HOME/jars/*"
if [ -n "${SPARK_CLASSPATH:-}" ]; then
  classpath="$classpath:$SPARK_CLASSPATH"
fi

mode="${1:-}"
case "$mode" in
  executor)
    shift
    # SPARK_JAVA_OPT_0, _1, ... hold one JVM option each (spark.* settings the executor needs at start), in order.
    java_opts=()
    for name in $(compgen -e | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n); do
      java_opts+=("${!name}")
    done
    exec "${JAVA_HOME:-/usr}/bin/java" "${java_opts[@]}" \
      "-Xms${SPARK_EXECUTOR_MEMORY}" "-Xmx${SPARK_EXECUTOR_MEMORY}" \
      -cp "$classpath" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "$SPARK_EXECUTOR_POD_NAME" \
      "$@"
    ;;
  driver)
    shift
    exec "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
      --deploy-mode client \
      "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
