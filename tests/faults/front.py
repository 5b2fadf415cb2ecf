"""A fault-injecting front for an S3 server (moto), on 127.0.0.1 or a given address: every request is forwarded
unchanged (its Host header included, so signatures still check) unless the plan in force (tests/faults/plan.py) hits
it with a fault: its response lost after it was applied, 503 SlowDown, 500 InternalError, a reset connection, or
latency. Every injected fault is recorded. Test code only.

Clients reach it as their S3 endpoint (`AWS_ENDPOINT_URL`, path-style, `AWS_ALLOW_HTTP`): delta-rs and obstore both
talk to it through object_store. It runs in a process of its own (`python -m tests.faults.front BACKEND_URL`
prints its port): delta-rs's filesystem handler holds the GIL while it waits for a response, so a front in the
caller's process would never answer it. `FaultFront` starts it and drives it over HTTP: `PUT /_front/plan` sets the
plan (occurrence counts and budgets start afresh), `GET /_front/faults` returns the faults injected so far and
`GET /_front/requests` the requests seen per method and target (no bucket name starts with `_`).
"""

from __future__ import annotations

import http.client
import json
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.faults.plan import Decider, FaultKind, FaultPlan, FaultRule, InjectedFault, classify

CONTROL = "/_front/"
_HOP_HEADERS = ("connection", "keep-alive", "transfer-encoding", "expect", "content-length", "date", "server")
_ERRORS = {
    FaultKind.SLOW_DOWN: (503, "SlowDown", "Please reduce your request rate."),
    FaultKind.SERVER_ERROR: (500, "InternalError", "We encountered an internal error. Please try again."),
    FaultKind.APPLIED_ERROR: (500, "InternalError", "We encountered an internal error. Please try again."),
}


class FrontState:
    """The plan in force, the faults injected and the requests seen (shared by the handler threads)."""

    def __init__(self, backend: str) -> None:
        parts = urlsplit(backend)
        self.backend_host, self.backend_port = parts.hostname or "127.0.0.1", int(parts.port or 80)
        self.lock = threading.Lock()
        self.decider = Decider(FaultPlan(0))
        self.plans = 0
        self.injected: list[dict[str, Any]] = []
        self.seen: Counter[str] = Counter()

    def set_plan(self, plan: FaultPlan) -> None:
        with self.lock:
            self.decider = Decider(plan)
            self.plans += 1

    def decide(self, method: str, path: str, body: bytes) -> FaultRule | None:
        with self.lock:
            target, _ = classify(path, body)
            self.seen[f"{method} {target}"] += 1
            decided = self.decider.decide(method, path, body)
            if decided is None:
                return None
            index, rule, target = decided
            fault = {"kind": rule.kind, "target": target, "method": method, "path": path, "rule": index}
            self.injected.append({**fault, "plan": self.plans})
            return rule

    def forward(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, list[Any], bytes]:
        connection = http.client.HTTPConnection(self.backend_host, self.backend_port, timeout=120)
        try:
            connection.request(method, path, body=body if body or method in ("PUT", "POST") else None, headers=headers)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()


def _handler(state: FrontState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        dropped = False

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline().strip():  # trailers up to the empty line
                    pass
                return b"".join(chunks)
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _reply(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
            self.send_response(status)
            head = self.command == "HEAD"  # the object's length, no body
            for key, value in headers:
                if key.lower() not in _HOP_HEADERS or (head and key.lower() == "content-length"):
                    self.send_header(key, value)
            if not head:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head and body:
                self.wfile.write(body)

        def _drop(self) -> None:
            """Reset the connection: no answer, an RST once the handler has let go of the socket (finish)."""
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.dropped = True

        def finish(self) -> None:
            super().finish()
            if self.dropped:
                self.connection.close()

        def _control(self, body: bytes) -> None:
            name = self.path.removeprefix(CONTROL)
            if self.command == "PUT" and name == "plan":
                state.set_plan(FaultPlan.from_json(json.loads(body)))
                answer: Any = {"plans": state.plans}
            elif name == "faults":
                with state.lock:
                    answer = list(state.injected)
            elif name == "requests":
                with state.lock:
                    answer = dict(state.seen)
            else:
                self._reply(404, b"no such control", [])
                return
            self._reply(200, json.dumps(answer).encode(), [("Content-Type", "application/json")])

        def _serve(self) -> None:
            body = self._body()
            if self.path.startswith(CONTROL):
                self._control(body)
                return
            rule = state.decide(self.command, self.path, body)
            kind = rule.kind if rule is not None else None
            if kind in (FaultKind.SLOW_DOWN, FaultKind.SERVER_ERROR):
                self._error(kind)
                return
            if kind is FaultKind.RESET:
                self._drop()
                return
            if rule is not None and kind is FaultKind.LATENCY:
                time.sleep(rule.latency_seconds)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
            status, response_headers, data = state.forward(self.command, self.path, body, headers)
            if kind is FaultKind.LOST_RESPONSE:
                self._drop()
            elif kind is FaultKind.APPLIED_ERROR:
                self._error(kind)
            else:
                self._reply(status, data, response_headers)

        def _error(self, kind: FaultKind) -> None:
            status, code, message = _ERRORS[kind]
            xml = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message>"
            self._reply(status, f"{xml}<RequestId>front</RequestId></Error>".encode(), [])

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _serve

    return Handler


def serve(backend: str, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, 0), _handler(FrontState(backend)))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class FaultFront:
    """The front in its own process, in front of the S3 server at `backend`; `endpoint` is what clients use. It
    listens on `host`: loopback, or an address pods reach (the local Kubernetes cluster's node address)."""

    def __init__(self, backend: str, log: Path, host: str = "127.0.0.1") -> None:
        root = Path(__file__).resolve().parents[2]
        self._log = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.front", backend, host],
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=root,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the fault front exited: {log.read_text(errors='replace')[-2000:]}")
        self.endpoint = f"http://{host}:{int(line)}"

    def _call(self, method: str, name: str, data: Any = None) -> Any:
        body = None if data is None else json.dumps(data).encode()
        request = urllib.request.Request(f"{self.endpoint}{CONTROL}{name}", data=body, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def plan(self, seed: int, *rules: FaultRule) -> None:
        """Put `rules` in force (none: every request passes), counting occurrences and budgets afresh."""
        self._call("PUT", "plan", FaultPlan(seed, rules).to_json())

    def faults(self) -> list[InjectedFault]:
        return [InjectedFault.from_json(f) for f in self._call("GET", "faults")]

    def requests(self) -> dict[str, int]:
        """Requests seen so far per "METHOD target"."""
        seen: dict[str, int] = self._call("GET", "requests")
        return seen

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self._log.close()

    def __enter__(self) -> FaultFront:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":  # `python -m tests.faults.front BACKEND_URL [HOST]`: serve, print the port
    running = serve(*sys.argv[1:3])
    print(running.server_address[1], flush=True)
    while True:
        time.sleep(3600)
