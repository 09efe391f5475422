"""`python -m bench calls` reads wrk's summary (bench/wrk.py): the figures it divides come from here."""

from __future__ import annotations

import collections
import http.server
import math
import shutil
import threading

import pytest

from bench import wrk

SUMMARY = """Running 5s test @ http://127.0.0.1:40123
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     6.10ms   12.01ms 160.00ms   95.12%
    Req/Sec     1.27k   201.33     1.60k    71.00%
  Latency Distribution
     50%    4.20ms
     75%    6.01ms
     90%    9.87ms
     99%  160.00ms
  12575 requests in 5.00s, 2.41MB read
  Socket errors: connect 0, read 1, write 0, timeout 2
  Non-2xx or 3xx responses: 4
Requests/sec:   2514.82
Transfer/sec:    493.39KB
"""


def test_it_reads_the_requests_the_errors_and_the_percentiles() -> None:
    result = wrk.parse(SUMMARY)
    assert (result.requests, result.seconds, result.non_2xx, result.socket_errors) == (12575, 5.0, 4, 3)
    assert (result.p50_ms, result.p99_ms) == (4.2, 160.0)
    assert math.isnan(wrk.parse(SUMMARY.replace("     99%  160.00ms\n", "")).p99_ms)


def test_it_uses_each_token_at_most_its_uses() -> None:
    """wrk against a loopback server that counts the tokens it sees: none is used more than
    `uses_per_token` times (a sender's 30th prompt would ask the owner), whatever the threads."""
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed")
    seen: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    class Counting(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                seen[self.headers.get("Authorization", "")] += 1
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        requests = wrk.Requests("POST", "/x", ['{"a":1}'], tokens=[f"t{n}" for n in range(20_000)], uses_per_token=3)
        result = wrk.run(f"http://127.0.0.1:{server.server_port}", requests, seconds=1, threads=2, connections=4)
    finally:
        server.shutdown()
    assert result.requests > 0 and result.non_2xx == 0
    assert sum(seen.values()) >= result.requests
    assert max(seen.values()) <= 3, seen.most_common(3)
