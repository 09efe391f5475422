"""Web Push's outside world, faked as it speaks on the wire: a push service on loopback that
records what it is sent, and a browser's subscription keys that decrypt it (RFC 8291)."""

from __future__ import annotations

import base64
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import http_ece
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat


class PushService:
    """A push service on loopback: records each push (headers and encrypted body); `/gone/…`
    subscriptions answer 410 as a push service does for an expired one, `/flaky/…` 500 the first time."""

    def __init__(self) -> None:
        self.pushed: list[tuple[str, dict[str, str], bytes]] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # the http.server name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                service.pushed.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                first = sum(1 for path, _, _ in service.pushed if path == self.path) == 1
                status = 410 if self.path.startswith("/gone/") else 500 if self.path.startswith("/flaky/") and first else 201
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.origin = f"http://127.0.0.1:{self.server.server_port}"

    def at(self, path: str) -> list[bytes]:
        return [body for seen, _, body in list(self.pushed) if seen == path]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class BrowserKeys:
    """What a browser's PushManager makes for a subscription: a P-256 key pair and an auth secret."""

    def __init__(self) -> None:
        self.private = ec.generate_private_key(ec.SECP256R1())
        self.auth = os.urandom(16)

    def keys(self) -> dict[str, str]:
        point = self.private.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
        return {"p256dh": b64url(point), "auth": b64url(self.auth)}

    def decrypt(self, body: bytes) -> dict[str, Any]:
        return json.loads(http_ece.decrypt(body, private_key=self.private, auth_secret=self.auth, version="aes128gcm"))
