"""A scripted OpenAI-compatible chat server on 127.0.0.1 for the HTTP backend tests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class ChatServer:
    """Replies to POST /v1/chat/completions from a script; records every request.

    Each script entry is (status, body, delay_s); once the script runs out the server answers
    with the last entry again, so a client that retries too often is seen in ``requests`` rather
    than hanging the test.
    """

    def __init__(self):
        self.script: list[tuple[int, object, float]] = []
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with server._lock:
                    index = len(server.requests)
                    server.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "json": json.loads(body)}
                    )
                    status, reply, delay = server.script[min(index, len(server.script) - 1)]
                time.sleep(delay)
                if callable(reply):
                    reply = reply(server.requests[index]["json"])
                data = reply.encode() if isinstance(reply, str) else json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # The client gave up (a timeout test); nothing to answer.

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


def chat_reply(content: str | None) -> dict:
    """A minimal chat-completions response body."""
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    # A short poll interval keeps shutdown() (which waits for the next poll) from slowing teardown.
    thread = threading.Thread(
        target=server.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
        thread.join(timeout=5)
