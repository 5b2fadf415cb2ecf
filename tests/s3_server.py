"""moto_server, a real local S3 server with IAM signature checks on, for the tests and benches that need S3: started
on a free loopback port, with a user, an access key and a bucket (tests/test_s3.py's `s3` fixture, the fault runs of
tests/reliability/test_storage_faults.py and bench/storage_faults_bench.py)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError

from tests.helpers import wait_for
from tests.spark_cluster import free_port

REGION = "us-east-1"
REQUESTS_MARKER = "requests-so-far"


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    key_id: str
    secret: str = field(repr=False)
    bucket: str
    request_log: Path

    def options(self) -> dict[str, str]:
        """delta-rs storage options for the server; conditional_put=etag makes concurrent commits safe."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": self.key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_REGION": REGION,
            "conditional_put": "etag",
        }

    def through(self, endpoint: str) -> S3Server:
        """The same server and credentials reached at another endpoint (a front in front of it)."""
        return replace(self, endpoint=endpoint)

    def table_uri(self, name: str) -> str:
        return f"s3://{self.bucket}/{name}-{uuid.uuid4().hex[:8]}"

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.key_id,
            aws_secret_access_key=self.secret,
            region_name=REGION,
        )

    def requests(self) -> list[str]:
        """The request lines the server logged so far ("GET /bucket/key?query HTTP/1.1"). The server logs a request
        just after answering it: a marker request sent now is logged after every request answered before it."""
        marker = f"{REQUESTS_MARKER}-{uuid.uuid4().hex}"
        with contextlib.suppress(ClientError):  # 404: no such object
            self.client().head_object(Bucket=self.bucket, Key=marker)

        def lines() -> list[str]:
            text = re.sub(r"\x1b\[[0-9;]*m", "", self.request_log.read_text(encoding="utf-8", errors="replace"))
            return [line.split('"')[1] for line in text.splitlines() if line.count('"') >= 2 and " HTTP/1.1" in line]

        wait_for(lambda: any(marker in line for line in lines()), f"the server to log the request for {marker}")
        return [line for line in lines() if REQUESTS_MARKER not in line]


def s3_environment(s3: S3Server, secret: str | None = None) -> dict[str, str]:
    """The standard AWS environment variables (what a deployment sets instead of storage options)."""
    return {
        "AWS_ENDPOINT_URL": s3.endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": s3.key_id,
        "AWS_SECRET_ACCESS_KEY": secret or s3.secret,
        "AWS_REGION": REGION,
        "RECLUSTER_STORAGE_OPTIONS__CONDITIONAL_PUT": "etag",
    }


def _created_user(iam: Any) -> bool:
    try:
        iam.create_user(UserName="recluster")
    except (EndpointConnectionError, ConnectionClosedError):  # not listening yet; listening, not answering yet
        return False
    return True


@contextlib.contextmanager
def moto_server(work: Path, indexed_listings: bool = False) -> Iterator[S3Server]:
    """moto_server on a free loopback port, its request log in `work`. After three unauthenticated IAM calls (user,
    policy, access key) it checks every request's signature, so wrong credentials fail as they would on AWS. With
    `indexed_listings`, listings cost what they cost on S3, not the bucket's size (tests/moto_indexed.py)."""
    port = free_port()
    request_log = work / "requests.log"
    server = (
        [sys.executable, "-m", "tests.moto_indexed"]
        if indexed_listings
        else [str(Path(sys.executable).parent / "moto_server")]
    )
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
    with open(request_log, "w", encoding="utf-8") as log_file:
        process = subprocess.Popen(
            [*server, "-H", "127.0.0.1", "-p", str(port)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=Path(__file__).parents[1],
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        admin = {"endpoint_url": endpoint, "aws_access_key_id": "x", "aws_secret_access_key": "x"}
        iam = boto3.client("iam", region_name=REGION, **admin)
        wait_for(lambda: _created_user(iam), "moto_server to answer", process, timeout=30)
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="recluster", PolicyName="all", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="recluster")["AccessKey"]
        found = S3Server(endpoint, key["AccessKeyId"], key["SecretAccessKey"], "lake", request_log)
        found.client().create_bucket(Bucket=found.bucket)
        yield found
    finally:
        process.terminate()
        process.wait(timeout=30)
