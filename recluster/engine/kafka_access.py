"""Whether the Kafka brokers can be used with the configured client settings, asked once before a job starts.

kafka-python retries a refused TLS handshake or SASL login until its bootstrap times out and then reports only
"Unable to bootstrap" (Apache Kafka closes the connection on a wrong SCRAM password without an error response it can
read). So when the probe fails, the cause is found step by step with the standard library: the TCP connection, then
the TLS handshake against the configured CA, and else, with a SASL protocol, the login. The answer is one line.
A broker that cannot be reached at all is no configuration problem: the job starts and waits for it (an outage never
stops reclustering).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
from collections.abc import Iterator, Mapping

from recluster.settings_job import KafkaSettings

log = logging.getLogger(__name__)

PROBE_SECONDS = 10.0


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    """kafka-python logs every failed attempt at ERROR: the probe reports one line instead."""
    logger = logging.getLogger(name)
    before = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(before)


def kafka_problem(settings: KafkaSettings) -> str | None:
    """Why the brokers cannot be used with these settings, as one line; None when a client can list topics, or when
    no broker answers at all (then the job waits for them)."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    timeout_ms = int(PROBE_SECONDS * 1000)
    with _quiet("kafka"):
        try:
            client = KafkaConsumer(
                bootstrap_servers=settings.bootstrap_servers,
                bootstrap_timeout_ms=timeout_ms,
                request_timeout_ms=timeout_ms,
                **dict(settings.client_options),
            )
            try:
                client.topics()
            finally:
                client.close()
        except KafkaError as error:
            return _diagnosis(settings.bootstrap_servers, settings.client_options, error)
    return None


def _diagnosis(bootstrap_servers: str, options: Mapping[str, str], error: Exception) -> str | None:
    server = bootstrap_servers.split(",")[0].strip()
    host, _, port = server.rpartition(":")
    protocol = options.get("security_protocol", "PLAINTEXT").upper()
    try:
        connection = socket.create_connection((host, int(port)), timeout=PROBE_SECONDS)
    except ValueError:
        return f"kafka: bootstrap server {server!r} is not host:port"
    except OSError as refused:
        log.warning("kafka: the broker at %s cannot be reached yet (%s); waiting for it", server, refused)
        return None
    with connection:
        if protocol in ("SSL", "SASL_SSL"):
            cafile = options.get("ssl_cafile")
            context = ssl.create_default_context(cafile=cafile)
            context.check_hostname = str(options.get("ssl_check_hostname", "true")).lower() != "false"
            try:
                context.wrap_socket(connection, server_hostname=host).close()
            except ssl.SSLCertVerificationError as untrusted:
                trusted = f"ssl_cafile {cafile}" if cafile else "the system's CAs"
                return (
                    f"kafka: the TLS certificate of the broker at {server} is not trusted by {trusted}: "
                    f"{untrusted.verify_message}"
                )
            except (ssl.SSLError, OSError) as failed:
                return f"kafka: the TLS handshake with the broker at {server} failed: {failed}"
    if protocol.startswith("SASL_"):
        mechanism = options.get("sasl_mechanism", "PLAIN")
        user = options.get("sasl_plain_username", "")
        return (
            f"kafka: SASL {mechanism} login as {user!r} refused by the broker at {server}: "
            "wrong sasl_plain_username or sasl_plain_password (or the mechanism is not enabled for that user)"
        )
    return f"kafka: cannot use the broker at {server} ({protocol}): {error}"
