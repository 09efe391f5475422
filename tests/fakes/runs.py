"""A fake Hermes-style agent server for tests: `/v1/runs` over real HTTP with SSE, in the wire
format `oar/providers/runs.py` documents (and docs/decisions.md records), plus `/v1/models`
and the session naming endpoint `PATCH /api/sessions/<id>`.

The server keeps a transcript per session (the inputs it received). What a run does depends
on markers in its input: `#history` (says how many inputs its session holds), `#tool` (tool
events), `#think` (reasoning deltas, then a `reasoning.available` replay of the answer),
`#approve` (an approval request; waits for the answer), `#clarify` (a clarification; waits),
`#form` (the form-shaped clarification of two questions), `#stall` (a little text, then only
keep-alives until stopped), `#drop` (the connection dropped mid-stream), `#fail`
(`run.failed`), `#badevent` (an event that is not JSON), `#noend` (the stream ends without
a terminal event), `#401` (refused, quoting the key), `#500` (a 500 whose body echoes the
key), `#html` (an HTML page instead of JSON), `#garbage` (a 202 that is not JSON), `#429`
(rate limited once). Anything else: `runs: <input>`.
"""

from __future__ import annotations

import json
import queue
import secrets
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, request
from werkzeug.serving import make_server

from tests.fakes.llm import QuietHandler

USAGE = {"input_tokens": 13, "output_tokens": 5, "total_tokens": 18}
# Keep-alives while a run waits: well under the tests' 3 s read timeout.
KEEPALIVE_SECONDS = 0.2


@dataclass
class Run:
    id: str
    session_id: str
    input: str
    stopped: threading.Event = field(default_factory=threading.Event)
    answers: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    waiting_for: str | None = None  # "approval" | "clarify" while the run waits on an answer


class FakeRunsServer:
    def __init__(self, api_key: str = "hk-fake-runs-key-0123456789") -> None:
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self.runs: dict[str, Run] = {}
        self.sessions: dict[str, list[str]] = {}
        self.titles: list[tuple[str, str]] = []
        # How PATCH /api/sessions answers: "ok", "conflict" (409), "drop" (no answer), "hold"
        # (waits until `release_titles` is set, then ok).
        self.title_mode = "ok"
        self.release_titles = threading.Event()
        self.title_answered = threading.Event()
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.app = self._make_app()
        self.server = make_server("127.0.0.1", 0, self.app, threaded=True, request_handler=QuietHandler)
        self.base_url = f"http://127.0.0.1:{self.server.server_port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FakeRunsServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release_titles.set()
        for run in list(self.runs.values()):
            run.stopped.set()
        self.server.shutdown()

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.runs.clear()
            self.sessions.clear()
            self.titles.clear()
            self.counts.clear()
        self.title_mode = "ok"
        self.release_titles.clear()
        self.title_answered.clear()

    def bodies(self, method: str, suffix: str) -> list[dict[str, Any]]:
        return [entry["body"] for entry in self.requests if entry["method"] == method and entry["path"].endswith(suffix)]

    # The app ---------------------------------------------------------------------------------

    def _make_app(self) -> Flask:
        app = Flask("fake-runs")

        @app.before_request
        def record() -> None:
            with self.lock:
                self.requests.append({
                    "method": request.method, "path": request.path, "headers": dict(request.headers),
                    "body": request.get_json(silent=True),
                })

        @app.get("/v1/models")
        def models() -> Any:
            if not self._key_ok():
                return self._unauthorized()
            return {"object": "list", "data": [{"id": "hermes-agent", "object": "model"}]}

        @app.post("/v1/runs")
        def start_run() -> Any:
            body = request.get_json(silent=True) or {}
            text = str(body.get("input") or "")
            with self.lock:
                self.counts[text] = self.counts.get(text, 0) + 1
                seen = self.counts[text]
            if "#401" in text:
                return self._unauthorized(self.api_key)
            if not self._key_ok():
                return self._unauthorized()
            if "#500" in text:
                message = f"upstream failure while calling the model with key {self.api_key}"
                return {"error": {"message": message, "type": "server_error"}}, 500
            if "#html" in text:
                return Response("<html><body><h1>Sign in</h1></body></html>", content_type="text/html")
            if "#garbage" in text:
                return Response("run accepted {{{ not json", status=202, content_type="application/json")
            if "#429" in text and seen == 1:
                return Response(json.dumps({"error": {"message": "Too many runs"}}), status=429, headers={"retry-after": "0"},
                                content_type="application/json")
            if not text:
                return {"error": {"message": "Missing 'input' field"}}, 400
            run_id = "run_" + secrets.token_hex(8)
            session_id = str(body.get("session_id") or run_id)
            with self.lock:
                self.sessions.setdefault(session_id, []).append(text)
                self.runs[run_id] = Run(run_id, session_id, text)
            return {"run_id": run_id, "status": "started", "replayed": False}, 202

        @app.get("/v1/runs/<run_id>/events")
        def events(run_id: str) -> Any:
            if not self._key_ok():
                return self._unauthorized()
            run = self.runs.get(run_id)
            if run is None:
                return {"error": {"message": f"Run not found: {run_id}", "code": "run_not_found"}}, 404
            return Response(self._script(run), content_type="text/event-stream")

        @app.post("/v1/runs/<run_id>/approval")
        def approval(run_id: str) -> Any:
            return self._answer(run_id, "approval", "hermes.run.approval_response")

        @app.post("/v1/runs/<run_id>/clarify")
        def clarify(run_id: str) -> Any:
            return self._answer(run_id, "clarify", "hermes.run.clarify_response")

        @app.post("/v1/runs/<run_id>/stop")
        def stop(run_id: str) -> Any:
            if not self._key_ok():
                return self._unauthorized()
            run = self.runs.get(run_id)
            if run is None:
                return {"error": {"message": f"Run not found: {run_id}"}}, 404
            run.stopped.set()
            return {"run_id": run_id, "status": "stopping"}

        @app.patch("/api/sessions/<session_id>")
        def name_session(session_id: str) -> Any:
            if not self._key_ok():
                return self._unauthorized()
            title = str((request.get_json(silent=True) or {}).get("title"))
            with self.lock:
                self.titles.append((session_id, title))
            mode = self.title_mode
            if mode == "drop":
                sock = request.environ.get("werkzeug.socket")
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
                raise ConnectionAbortedError("the fake drops the connection")
            if mode == "hold":
                self.release_titles.wait(30)
            self.title_answered.set()
            if mode == "conflict":
                return {"error": {"message": f"Title '{title}' is already in use"}}, 409
            return {"id": session_id, "title": title}

        return app

    def _key_ok(self) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.api_key}"

    def _unauthorized(self, sent: str | None = None) -> Any:
        sent = sent or request.headers.get("Authorization", "")
        return {"error": {"message": f"Invalid API key: {sent}", "code": "gateway_auth_failed"}}, 401

    def _answer(self, run_id: str, kind: str, name: str) -> Any:
        if not self._key_ok():
            return self._unauthorized()
        run = self.runs.get(run_id)
        if run is None:
            return {"error": {"message": f"Run not found: {run_id}"}}, 404
        if run.waiting_for != kind:
            return {"error": {"message": f"Run has no pending {kind}: {run_id}", "code": f"{kind}_not_pending"}}, 409
        body = request.get_json(silent=True) or {}
        run.waiting_for = None
        run.answers.put(body)
        return {"object": name, "run_id": run_id, "resolved": 1}

    # What a run streams ----------------------------------------------------------------------

    def _script(self, run: Run) -> Iterator[str]:
        text = run.input
        if "#badevent" in text:
            yield "data: not json at all\n\n"
            return
        if "#fail" in text:
            yield event(run, "run.failed", error="the model provider refused the request")
            return
        if "#tool" in text:
            yield event(run, "tool.started", tool="terminal", preview="ls -la")
            yield event(run, "tool.completed", tool="terminal", duration=0.1, error=False)
        answer = f"runs: {text}"
        if "#history" in text:
            answer = f"runs: input {len(self.sessions[run.session_id])} of session {run.session_id}"
        if "#think" in text:
            yield event(run, "reasoning.delta", delta="Let me ")
            yield event(run, "reasoning.delta", delta="think.")
            answer = "thought through"
            yield event(run, "reasoning.available", text=answer)
        if "#approve" in text:
            yield event(run, "tool.started", tool="terminal", preview="rm -rf build")
            run.waiting_for = "approval"
            yield event(run, "approval.request", command="rm -rf build", description="recursive delete",
                        pattern_key="rm-rf", request_id="req-1", allow_permanent=True,
                        choices=["once", "session", "always", "deny"])
            body = yield from self._wait(run)
            if body is None:
                return
            answer = f"approval: {body.get('choice')} ({body.get('request_id')})"
        if "#clarify" in text or "#form" in text:
            run.waiting_for = "clarify"
            if "#form" in text:
                yield event(run, "clarify.request", clarify_id="clr_2", questions=[
                    {"id": "q0", "prompt": "Which environment?", "choices": ["staging", "production"], "multi_select": False},
                    {"id": "q1", "prompt": "Anything to tell the reviewers?", "choices": None, "multi_select": False},
                ])
            else:
                yield event(run, "clarify.request", clarify_id="clr_1", question="Which branch?", choices=["main", "dev"])
            body = yield from self._wait(run)
            if body is None:
                return
            answer = f"clarified: {json.dumps(body.get('responses', body.get('response')))}"
        if "#stall" in text:
            yield event(run, "message.delta", delta="working ")
            yield from self._wait(run)
            return
        words = answer.split(" ")
        for index, word in enumerate(words):
            yield event(run, "message.delta", delta=word + (" " if index < len(words) - 1 else ""))
            if "#drop" in text and index == 0:
                raise ConnectionAbortedError("the fake drops the connection")
        if "#noend" in text:
            return
        yield event(run, "run.completed", output=answer, usage=USAGE)
        yield ": stream closed\n\n"

    def _wait(self, run: Run) -> Iterator[str]:
        """Keep-alives until an answer arrives (returned) or the run is stopped (None)."""
        while True:
            if run.stopped.is_set():
                yield event(run, "run.cancelled")
                return None
            try:
                return run.answers.get(timeout=KEEPALIVE_SECONDS)
            except queue.Empty:
                yield ": keepalive\n\n"


def event(run: Run, name: str, **fields: Any) -> str:
    """One frame as the server writes it: data only, the name in the JSON's `event` field."""
    return "data: " + json.dumps({"event": name, "run_id": run.id, "timestamp": 1.0, **fields}) + "\n\n"
