"""A small front for fake-gcs-server that makes it answer the way GCS answers delta-rs (object_store's XML API).

fake-gcs-server rejects the XML-API PUT object_store writes with (400 "invalid uploadType"), ignores `start-after`
in XML listings (delta-rs then fails from the third commit) and ignores `ifGenerationMatch` on media uploads (so a
create-if-absent would overwrite). The front translates: an XML PUT becomes a JSON-API media upload, made
create-if-absent under a lock when `x-goog-if-generation-match: 0` asks for it (412 otherwise); XML multipart uploads
are assembled here and uploaded whole at completion; listings are filtered by `start-after`. Everything else passes
through unchanged. Requests are forwarded with our address as Host: fake-gcs-server routes XML-API requests by
the public host (`-public-host`) they were sent to. Test code only.
"""

from __future__ import annotations

import http.client
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit


class GcsFront:
    def __init__(self, backend_port: int) -> None:
        self.backend_port = backend_port
        self.lock = threading.Lock()
        self.uploads: dict[str, dict[int, bytes]] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> GcsFront:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def backend(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> Any:
        connection = http.client.HTTPConnection("127.0.0.1", self.backend_port, timeout=60)
        # fake-gcs-server routes XML-API requests by the public host they were sent to: ours
        connection.request(method, path, body=body, headers={**(headers or {}), "Host": f"127.0.0.1:{self.port}"})
        response = connection.getresponse()
        data = response.read()
        connection.close()
        return response.status, dict(response.getheaders()), data

    def exists(self, bucket: str, name: str) -> bool:
        status, _, _ = self.backend("GET", f"/storage/v1/b/{bucket}/o/{quote(name, safe='')}")
        return bool(status == 200)

    def upload(self, bucket: str, name: str, data: bytes) -> tuple[int, bytes]:
        path = f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={quote(name, safe='')}"
        status, _, body = self.backend("POST", path, data, {"Content-Type": "application/octet-stream"})
        return status, body


def _handler(front: GcsFront) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            head = self.command == "HEAD"  # the object's length, no body
            for key, value in (headers or {}).items():
                skip = ("transfer-encoding", "connection", "date", "server") + (() if head else ("content-length",))
                if key.lower() not in skip:
                    self.send_header(key, value)
            if not head:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _split(self) -> tuple[str, str, dict[str, list[str]]]:
            parts = urlsplit(self.path)
            bucket, _, name = parts.path.lstrip("/").partition("/")
            return bucket, unquote(name), parse_qs(parts.query, keep_blank_values=True)

        def _passthrough(self, body: bytes | None = None) -> None:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
            status, response_headers, data = front.backend(self.command, self.path, body, headers)
            self._reply(status, data, response_headers)

        def do_GET(self) -> None:
            _, name, query = self._split()
            if self.path.startswith(("/storage/", "/upload/")) or name or "start-after" not in query:
                self._passthrough()
                return
            status, headers, data = front.backend("GET", self.path)
            after = query["start-after"][0]
            text = data.decode()
            text = re.sub(
                r"<Contents>.*?</Contents>",
                lambda m: m.group(0) if _key(m.group(0)) > after else "",
                text,
                flags=re.S,
            )
            self._reply(status, text.encode(), headers)

        def do_HEAD(self) -> None:
            self._passthrough()

        def do_DELETE(self) -> None:
            self._passthrough()

        def do_PUT(self) -> None:
            bucket, name, query = self._split()
            body = self._body()
            if self.path.startswith(("/storage/", "/upload/")):
                self._passthrough(body)
                return
            if "uploadId" in query:  # one part of an XML multipart upload
                with front.lock:
                    front.uploads[query["uploadId"][0]][int(query["partNumber"][0])] = body
                self._reply(200, b"", {"ETag": f'"{uuid.uuid4().hex}"'})
                return
            if self.headers.get("x-goog-if-generation-match") == "0":
                with front.lock:
                    if front.exists(bucket, name):
                        self._reply(412, b"<Error><Code>PreconditionFailed</Code></Error>")
                        return
                    status, data = front.upload(bucket, name, body)
            else:
                status, data = front.upload(bucket, name, body)
            self._reply(
                200 if status < 300 else status, b"" if status < 300 else data, {"ETag": f'"{uuid.uuid4().hex}"'}
            )

        def do_POST(self) -> None:
            bucket, name, query = self._split()
            body = self._body()
            if self.path.startswith(("/storage/", "/upload/")) or not name:
                self._passthrough(body)
                return
            if "uploads" in query:  # start an XML multipart upload
                upload = uuid.uuid4().hex
                with front.lock:
                    front.uploads[upload] = {}
                xml = (
                    "<?xml version='1.0' encoding='UTF-8'?><InitiateMultipartUploadResult>"
                    f"<Bucket>{bucket}</Bucket><Key>{name}</Key><UploadId>{upload}</UploadId>"
                    "</InitiateMultipartUploadResult>"
                )
                self._reply(200, xml.encode(), {"Content-Type": "application/xml"})
                return
            if "uploadId" in query:  # complete it: one upload of the parts in order
                with front.lock:
                    parts = front.uploads.pop(query["uploadId"][0], {})
                status, data = front.upload(bucket, name, b"".join(parts[n] for n in sorted(parts)))
                xml = (
                    f"<CompleteMultipartUploadResult><Location>{bucket}/{name}</Location><Bucket>{bucket}</Bucket>"
                    f'<Key>{name}</Key><ETag>"{uuid.uuid4().hex}"</ETag></CompleteMultipartUploadResult>'
                )
                self._reply(200 if status < 300 else status, xml.encode() if status < 300 else data)
                return
            self._passthrough(body)

    return Handler


def _key(contents: str) -> str:
    match = re.search(r"<Key>(.*?)</Key>", contents, re.S)
    return match.group(1) if match else ""


if __name__ == "__main__":  # `python -m tests.gcs_front BACKEND_PORT`: serve in a process of its own, print the port
    import sys
    import time

    # Its own process: delta-rs's filesystem handler holds the GIL while it waits for a response, so a front
    # in the test's own process would never answer it.
    running = GcsFront(int(sys.argv[1])).start()
    print(running.port, flush=True)
    while True:
        time.sleep(3600)
