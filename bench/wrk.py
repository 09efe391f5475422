"""wrk, the compiled HTTP load generator, driven from Python: a Lua script per workload, its
summary parsed. A compiled client leaves more of the machine's cores to the server under test than
the Python load generator (bench/load.py) does; what a call costs is read from the server's CPU.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


class WrkMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class Requests:
    """What one workload sends. `bodies` are taken in turn (each thread from its own place);
    `tokens` likewise, each for `uses_per_token` requests of a thread and never again (loop
    protection asks the owner about a conversation's 31st prompt to another session)."""

    method: str
    path: str
    bodies: Sequence[str] = ()
    tokens: Sequence[str] = ()
    uses_per_token: int = 0
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class WrkResult:
    requests: int
    seconds: float
    non_2xx: int
    socket_errors: int
    p50_ms: float
    p99_ms: float


def _lua_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a Lua string literal for the ASCII we send


def script(requests: Requests, threads: int) -> str:
    """The Lua script: each wrk thread numbers itself in `setup`, then builds each request."""
    bodies = ", ".join(_lua_string(body) for body in requests.bodies)
    tokens = ", ".join(_lua_string(token) for token in requests.tokens)
    headers = ", ".join(f"[{_lua_string(name)}] = {_lua_string(value)}" for name, value in requests.headers)
    return f"""
local counter = 1
local threads = {{}}
function setup(thread)
  thread:set("id", counter)
  table.insert(threads, thread)
  counter = counter + 1
end
bodies = {{{bodies}}}
tokens = {{{tokens}}}
base_headers = {{{headers}}}
uses_per_token = {requests.uses_per_token}
thread_count = {threads}
sent = 0
function request()
  local headers = {{}}
  for name, value in pairs(base_headers) do headers[name] = value end
  local body = nil
  if #bodies > 0 then body = bodies[((id - 1) * 7919 + sent) % #bodies + 1] end
  if #tokens > 0 then
    -- thread id uses tokens id, id + threads, id + 2 × threads, … each `uses_per_token` times
    local index = (id - 1) + thread_count * math.floor(sent / uses_per_token)
    headers["Authorization"] = "Bearer " .. tokens[index % #tokens + 1]
  end
  sent = sent + 1
  return wrk.format({_lua_string(requests.method)}, {_lua_string(requests.path)}, headers, body)
end
"""


def run(url: str, requests: Requests, seconds: float, threads: int, connections: int) -> WrkResult:
    """`wrk` for `seconds` against `url` (scheme, host and port; the path is the workload's)."""
    binary = shutil.which("wrk")
    if binary is None:
        raise WrkMissing("wrk is not installed (apt install wrk): python -m bench calls measures with it")
    with tempfile.TemporaryDirectory(prefix="oar-wrk-") as folder:
        lua = Path(folder) / "workload.lua"
        lua.write_text(script(requests, threads), encoding="utf-8")
        done = subprocess.run(
            [binary, "-t", str(threads), "-c", str(connections), "-d", f"{seconds:g}s", "--latency", "-s", str(lua), url],
            capture_output=True, text=True, timeout=seconds + 60, check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr or done.stdout}")
    return parse(done.stdout)


def parse(output: str) -> WrkResult:
    """wrk's summary: `N requests in 5.00s`, `Non-2xx or 3xx responses: N`, socket errors, and
    the latency distribution `--latency` prints."""
    found = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", output)
    if found is None:
        raise RuntimeError(f"wrk's output has no request count:\n{output}")
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[found[3]]
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    return WrkResult(
        requests=int(found[1]), seconds=float(found[2]) * scale,
        non_2xx=int(non_2xx[1]) if non_2xx else 0,
        socket_errors=sum(int(n) for n in errors.groups()) if errors else 0,
        p50_ms=_percentile(output, "50%"), p99_ms=_percentile(output, "99%"),
    )


def _percentile(output: str, label: str) -> float:
    found = re.search(rf"^\s*{re.escape(label)}\s+([\d.]+)(us|ms|s)\s*$", output, re.MULTILINE)
    if found is None:
        return float("nan")
    return float(found[1]) * {"us": 1e-3, "ms": 1.0, "s": 1000.0}[found[2]]
