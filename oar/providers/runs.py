"""`runs`: a Hermes-style agent server's `/v1/runs` protocol (docs/providers.md#agent-servers, seed 003).

The server keeps the transcript, so a turn sends only its own prompt and the agent-side
session id (`session_id`) from the turn before — never the history. The exception is the
first turn of a conversation that moved onto this provider mid-way: it carries a one-time
plain-text backfill of the transcript so far (its last 200,000 characters).

One turn, on the wire (`base_url` includes the version path, e.g. http://127.0.0.1:8642/v1):

1. `POST <base_url>/runs` `{input, session_id?, model?, model_options?, clarify: true}` with an
   `Idempotency-Key` (a retried start never starts two runs) → 202 `{run_id, status}`.
   Without `session_id` the server keys the new session by the run id, so that is the
   agent-side session id the next turn sends back.
2. `GET <base_url>/runs/<run_id>/events`: an event stream of JSON objects named by their
   `event` field: `message.delta {delta}` (reply text), `reasoning.delta {delta|text}`
   (thinking), `reasoning.available {text}` (a replay of the answer: dropped),
   `tool.started {tool, preview}` / `tool.completed {tool, error}` and `subagent.*`
   (activities), `approval.request {command, description, request_id?, choices}`,
   `clarify.request {clarify_id, question, choices}` or `{clarify_id, questions: […]}`,
   and one of `run.completed {output, usage}`, `run.failed {error}`, `run.cancelled`.
3. An approval becomes an Allow/Deny `ask_user` card answered with
   `POST <base_url>/runs/<run_id>/approval {choice: "once" | "deny", request_id?}`; a
   clarification becomes a free-text card per question answered with
   `POST <base_url>/runs/<run_id>/clarify {clarify_id, response}` (or `responses`, one per
   question, for the form shape). A stop sends `POST <base_url>/runs/<run_id>/stop`.
4. After the first successful turn of an agent-side session the relay names it once:
   `PATCH <base_url without its version path>/api/sessions/<id> {title}`.

Requests go through the shared skeleton (`oar.providers.sse`): the same error classes,
retries of rate limits and overloads before anything streamed, cancellation that closes
the socket under a blocked read.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import requests

from oar.providers.base import (
    Activity,
    AgentSession,
    Provider,
    TextDelta,
    TurnControl,
    TurnEvent,
    TurnFailed,
    TurnRequest,
    Usage,
)
from oar.providers.llm import (
    BACKOFF_SECONDS,
    MAX_RETRIES,
    MAX_RETRY_AFTER_SECONDS,
    StreamFailure,
    Thinking,
    ThinkingBlock,
)
from oar.providers.sse import ProviderError, SseEvent, StreamRequest, open_stream, redact, request_json

# The most of a conversation's transcript sent as the one-time backfill (docs/providers.md#agent-servers).
BACKFILL_CHARS = 200_000
BACKFILL_HEADER = (
    "[This conversation began before you joined it. Its transcript so far follows as plain text, "
    "for context only; the new message comes after it.]"
)
BACKFILL_FOOTER = "[End of the earlier transcript. The new message follows.]"
# The server-side session's name: this prefix and the first line of the first prompt.
TITLE_PREFIX = "oar: "
TITLE_CHARS = 48
# Naming the session: the request's own timeout, and the most it may delay the reply.
NAMING_TIMEOUT_SECONDS = 10.0
NAMING_WAIT_SECONDS = 2.5
# Telling the server to stop a run the relay stopped (done beside the turn, never awaited).
STOP_TIMEOUT_SECONDS = 5.0
APPROVE, DENY = "Allow", "Deny"
# Ids the relay puts into URL paths: anything else from a server is refused as garbage.
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
ACTIVITY_CHARS = 200


# What the parser reports, besides TextDelta, Thinking, Activity, Usage, StreamFailure ---------


@dataclass(frozen=True)
class ApprovalRequest:
    command: str
    description: str
    request_id: str | None = None


@dataclass(frozen=True)
class ClarifyQuestion:
    prompt: str
    choices: tuple[str, ...] = ()
    multi_select: bool = False


@dataclass(frozen=True)
class ClarifyRequest:
    clarify_id: str
    questions: tuple[ClarifyQuestion, ...]
    form: bool = False  # answered with `responses` (one per question), not one `response`


@dataclass(frozen=True)
class RunEnded:
    status: str  # completed | failed | cancelled
    output: str = ""
    error: str = ""


RunsParsed = TextDelta | Thinking | Activity | Usage | ApprovalRequest | ClarifyRequest | RunEnded | StreamFailure


class RunsParser:
    """Pure: events of a run's stream in, parsed events out."""

    def feed(self, event: SseEvent) -> list[RunsParsed]:
        data = event.data.strip()
        if not data:
            return []
        try:
            payload = json.loads(data)
        except ValueError:
            return [StreamFailure("protocol", f"an event that is not JSON: {data[:120]!r}")]
        if not isinstance(payload, dict):
            return []
        name = str(payload.get("event") or (event.event if event.event != "message" else ""))
        handler = _HANDLERS.get(name)
        return handler(payload) if handler else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text[:ACTIVITY_CHARS] + ("…" if len(text) > ACTIVITY_CHARS else "")


def _delta(payload: dict[str, Any]) -> list[RunsParsed]:
    text = _text(payload.get("delta"))
    return [TextDelta(text)] if text else []


def _reasoning(payload: dict[str, Any]) -> list[RunsParsed]:
    text = _text(payload.get("delta")) or _text(payload.get("text"))
    return [Thinking(text)] if text else []


def _tool_started(payload: dict[str, Any]) -> list[RunsParsed]:
    tool = _text(payload.get("tool")) or "tool"
    return [Activity(_short(f"{tool} {_text(payload.get('preview'))}".strip()))]


def _tool_completed(payload: dict[str, Any]) -> list[RunsParsed]:
    if payload.get("error") is True:
        return [Activity(_short(f"{_text(payload.get('tool')) or 'tool'} failed"))]
    return []


def _subagent(payload: dict[str, Any]) -> list[RunsParsed]:
    what = _text(payload.get("goal")) or _text(payload.get("preview")) or _text(payload.get("summary"))
    if payload.get("event") == "subagent.start":
        return [Activity(_short(f"subagent: {what}"))]
    status = _text(payload.get("status")) or "finished"
    return [Activity(_short(f"subagent {status}: {what}"))]


def _approval(payload: dict[str, Any]) -> list[RunsParsed]:
    request_id = _text(payload.get("request_id")) or None
    return [ApprovalRequest(_text(payload.get("command")), _text(payload.get("description")), request_id)]


def _clarify(payload: dict[str, Any]) -> list[RunsParsed]:
    clarify_id = _text(payload.get("clarify_id"))
    if not clarify_id:
        return [StreamFailure("protocol", "a clarification request without a clarify_id")]
    listed = payload.get("questions")
    if isinstance(listed, list) and listed:
        questions = tuple(
            ClarifyQuestion(
                _text(item.get("prompt")) or _text(item.get("question")), _choices(item.get("choices")),
                item.get("multi_select") is True,
            )
            for item in listed if isinstance(item, dict)
        )
        return [ClarifyRequest(clarify_id, questions, form=True)]
    question = ClarifyQuestion(_text(payload.get("question")), _choices(payload.get("choices")), payload.get("multi_select") is True)
    return [ClarifyRequest(clarify_id, (question,))]


def _choices(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(str(choice)[:200] for choice in value if isinstance(choice, str | int | float) and str(choice).strip())[:20]


def _completed(payload: dict[str, Any]) -> list[RunsParsed]:
    out: list[RunsParsed] = []
    usage = payload.get("usage")
    if isinstance(usage, dict):
        out.append(Usage(_int(usage.get("input_tokens")), _int(usage.get("output_tokens"))))
    out.append(RunEnded("completed", output=_text(payload.get("output"))))
    return out


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


_HANDLERS: dict[str, Callable[[dict[str, Any]], list[RunsParsed]]] = {
    "message.delta": _delta,
    "reasoning.delta": _reasoning,
    # `reasoning.available` replays the answer; it is not thinking (seed 003, ADR-0004).
    "reasoning.available": lambda _payload: [],
    "tool.started": _tool_started,
    "tool.completed": _tool_completed,
    "subagent.start": _subagent,
    "subagent.complete": _subagent,
    "approval.request": _approval,
    "clarify.request": _clarify,
    "run.completed": _completed,
    "run.failed": lambda payload: [RunEnded("failed", error=_text(payload.get("error")) or "no reason given")],
    "run.cancelled": lambda _payload: [RunEnded("cancelled")],
}


# The transcript backfill and the session's name (pure) ------------------------------------


def backfill_transcript(history: list[dict[str, str]]) -> str | None:
    """The conversation so far as plain text, its last BACKFILL_CHARS characters; None if empty."""
    speakers = {"assistant": "Assistant", "user": "User"}
    parts = [
        f"{speakers.get(item.get('role', ''), str(item.get('role') or 'User').capitalize())}: {item['text']}"
        for item in history if item.get("text")
    ]
    transcript = "\n\n".join(parts)
    if not transcript:
        return None
    if len(transcript) > BACKFILL_CHARS:
        transcript = "…" + transcript[-(BACKFILL_CHARS - 1) :]
    return transcript


def with_backfill(prompt: str, transcript: str | None) -> str:
    """The input of a turn: the prompt, after the backfill when there is one.

    The backfill rides in the input, not in `conversation_history`: a run's history is
    context for that run only, while its input is stored in the server's session, so the
    agent still has the backfill on later turns.
    """
    if not transcript:
        return prompt
    return f"{BACKFILL_HEADER}\n\n{transcript}\n\n{BACKFILL_FOOTER}\n\n{prompt}"


def session_title(prompt: str) -> str:
    """`oar: ` and the first non-empty line of the prompt, at most TITLE_CHARS characters."""
    first = next((line.strip() for line in prompt.splitlines() if line.strip()), "")
    title = TITLE_PREFIX + " ".join(first.split())
    return title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1] + "…"


def approval_question(approval: ApprovalRequest) -> str:
    command = approval.command.strip() or "(the server named no command)"
    reason = f"\n\n{approval.description.strip()}" if approval.description.strip() else ""
    return f"The agent asks to run:\n\n{command[:4000]}{reason[:1000]}\n\nAllow it once?"


# The provider ----------------------------------------------------------------------------


class RunsProvider(Provider):
    kind = "runs"
    metered = True
    supports_thinking = True
    needs_base_url = True

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **extra}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _request(self, url: str, body: dict[str, Any] | None, request: TurnRequest, method: str = "POST", **headers: str) -> StreamRequest:
        return StreamRequest(
            name=self.name, url=url, headers=self.headers(**headers), body=body, budget=0, api_key=self._api_key,
            connect_timeout=request.connect_timeout, read_timeout=request.read_timeout, method=method,
        )

    def run_turn(self, request: TurnRequest, control: TurnControl) -> Iterator[TurnEvent]:
        missing = self.missing_configuration()
        if missing:
            yield TurnFailed(missing)
            return
        transcript = None if request.agent_session_id else backfill_transcript(request.history())
        body: dict[str, Any] = {"input": with_backfill(request.prompt, transcript), "clarify": True}
        if request.agent_session_id:
            body["session_id"] = request.agent_session_id
        if request.model:
            body["model"] = request.model
        if request.effort:
            body["model_options"] = {"reasoning_effort": request.effort}
        http = requests.Session()
        run_id: str | None = None
        try:
            try:
                accepted = self._start(http, body, request, control)
                if accepted is None:
                    return  # stopped while waiting to retry
                run_id = str(accepted.get("run_id") or "")
                if not SAFE_ID.match(run_id):
                    raise ProviderError("protocol", f'Provider "{self.name}" accepted the run without a usable run_id ({run_id[:80]!r}).')
            except ProviderError as error:
                yield TurnFailed(error.message)
                return
            agent_session = request.agent_session_id or str(accepted.get("session_id") or run_id)
            ended = yield from self._follow(http, run_id, request, control)
            if ended is None or control.cancelled.is_set():
                return
            if ended.status == "failed":
                yield TurnFailed(f'Provider "{self.name}" reported that the run failed: {redact(ended.error, self._api_key)[:500]}')
            elif ended.status == "cancelled":
                yield TurnFailed(f'Provider "{self.name}" cancelled the run (it was stopped on the server).')
            else:
                if SAFE_ID.match(agent_session):
                    yield AgentSession(agent_session)
                    self._name_session(agent_session, request, control)
        finally:
            if control.cancelled.is_set() and run_id:
                self._stop_in_background(run_id)
            http.close()

    def _start(self, http: requests.Session, body: dict[str, Any], request: TurnRequest, control: TurnControl) -> dict[str, Any] | None:
        """Start the run, retrying rate limits and overloads; the same key makes a retry safe."""
        key = "oar-" + secrets.token_hex(16)
        start = self._request(f"{self.base_url}/runs", body, request, **{"Idempotency-Key": key, "Accept": "application/json"})
        attempt = 0
        while True:
            try:
                return request_json(http, start, control)
            except ProviderError as error:
                if not error.retryable or attempt >= MAX_RETRIES:
                    if error.retryable and attempt:
                        raise ProviderError(error.kind, f"{error.message} Gave up after {attempt} retries.") from None
                    raise
                wait = error.retry_after if error.retry_after is not None else BACKOFF_SECONDS[attempt]
                attempt += 1
                if not control.sleep(min(wait, MAX_RETRY_AFTER_SECONDS)):
                    return None

    def _follow(
        self, http: requests.Session, run_id: str, request: TurnRequest, control: TurnControl
    ) -> Generator[TurnEvent, None, RunEnded | None]:
        """Stream the run's events into the turn; returns how the run ended, or None when the
        turn is over already (stopped, or failed with the reason yielded)."""
        thinking = ThinkingBlock(inline=request.thinking == "inline")
        parser = RunsParser()
        wrote_text = False
        events = open_stream(http, self._request(f"{self.base_url}/runs/{run_id}/events", None, request, "GET", Accept="text/event-stream"), control)
        try:
            for event in events:
                for parsed in parser.feed(event):
                    if isinstance(parsed, TextDelta):
                        yield from thinking.close()
                        wrote_text = True
                        yield parsed
                    elif isinstance(parsed, Thinking):
                        yield from thinking.add(parsed.text)
                    elif isinstance(parsed, Activity | Usage):
                        yield parsed
                    elif isinstance(parsed, ApprovalRequest):
                        answered = yield from self._approve(http, run_id, parsed, request, control)
                        if not answered:
                            return None
                    elif isinstance(parsed, ClarifyRequest):
                        answered = yield from self._clarify(http, run_id, parsed, request, control)
                        if not answered:
                            return None
                    elif isinstance(parsed, StreamFailure):
                        detail = redact(parsed.message, self._api_key)
                        yield TurnFailed(f'Provider "{self.name}" sent a broken stream: {detail}')
                        return None
                    elif isinstance(parsed, RunEnded):
                        yield from thinking.close()
                        if parsed.status == "completed" and not wrote_text and parsed.output:
                            yield TextDelta(parsed.output)
                        return parsed
                if control.cancelled.is_set():
                    return None
        except ProviderError as error:
            yield TurnFailed(error.message)
            return None
        finally:
            events.close()
        if not control.cancelled.is_set():
            yield TurnFailed(f'The stream from provider "{self.name}" ended before the run was complete.')
        return None

    def _approve(
        self, http: requests.Session, run_id: str, approval: ApprovalRequest, request: TurnRequest, control: TurnControl
    ) -> Generator[TurnEvent, None, bool]:
        """An Allow/Deny card; the answer goes back to the server. False when the turn stopped."""
        answer = control.services.ask_user(approval_question(approval), [APPROVE, DENY], allow_freeform=False)
        if answer is None:
            return False
        allowed = answer.strip().casefold() == APPROVE.casefold()
        body: dict[str, Any] = {"choice": "once" if allowed else "deny"}
        if approval.request_id:
            body["request_id"] = approval.request_id
        command = _short(approval.command) or "the request"
        yield Activity(f"approval: {APPROVE if allowed else DENY} · {command}")
        yield from self._answer(http, f"{self.base_url}/runs/{run_id}/approval", body, request, control, "approval")
        return True

    def _clarify(
        self, http: requests.Session, run_id: str, clarify: ClarifyRequest, request: TurnRequest, control: TurnControl
    ) -> Generator[TurnEvent, None, bool]:
        """A free-text card per question; the answers go back to the server. False when stopped."""
        answers: list[Any] = []
        for question in clarify.questions:
            answer = control.services.ask_user(question.prompt or "The agent asks for clarification.", list(question.choices))
            if answer is None:
                return False
            text = "" if answer == "(dismissed)" else answer
            answers.append([text] if question.multi_select and clarify.form else text)
        if clarify.form:
            body: dict[str, Any] = {"clarify_id": clarify.clarify_id, "responses": answers}
        else:
            body = {"clarify_id": clarify.clarify_id, "response": answers[0] if answers else ""}
        yield Activity("clarification answered")
        yield from self._answer(http, f"{self.base_url}/runs/{run_id}/clarify", body, request, control, "clarification")
        return True

    def _answer(
        self, http: requests.Session, url: str, body: dict[str, Any], request: TurnRequest, control: TurnControl, what: str
    ) -> Iterator[TurnEvent]:
        """Deliver an answer. A refused one (e.g. the server's own wait ran out) is shown, not fatal:
        the run goes on and its stream says what the agent did instead."""
        try:
            request_json(http, self._request(url, body, request, Accept="application/json"), control)
        except ProviderError as error:
            yield Activity(_short(f"{what} not delivered: {error.message}"))

    def _name_session(self, agent_session: str, request: TurnRequest, control: TurnControl) -> None:
        """Name the server-side session once, after its first successful turn (docs/providers.md#agent-servers).

        Success and any HTTP refusal (a 4xx for a taken title) count as done; only a transport
        failure is remembered and retried after the next successful turn. The request has its
        own 10 s timeout and delays the reply by at most 2.5 s: it finishes in the background.
        """
        key = f"title:{agent_session}"
        title = session_title(request.prompt) if request.agent_session_id != agent_session else control.services.recall(key)
        if not title:
            return
        url = f"{re.sub(r'/v[0-9]+$', '', self.base_url)}/api/sessions/{quote(agent_session, safe='')}"
        headers = self.headers(Accept="application/json")

        def name() -> None:
            try:
                requests.patch(url, json={"title": title}, headers=headers, timeout=NAMING_TIMEOUT_SECONDS).close()
            except requests.RequestException:
                control.services.remember(key, title)
                return
            control.services.remember(key, None)

        naming = threading.Thread(target=name, name=f"oar-name-{agent_session[:40]}", daemon=True)
        naming.start()
        naming.join(NAMING_WAIT_SECONDS)

    def _stop_in_background(self, run_id: str) -> None:
        """Tell the server to stop the run; the relay's stop does not wait for its answer."""
        url, headers = f"{self.base_url}/runs/{run_id}/stop", self.headers(Accept="application/json")

        def stop() -> None:
            try:
                requests.post(url, json={}, headers=headers, timeout=STOP_TIMEOUT_SECONDS, allow_redirects=False).close()
            except requests.RequestException:
                pass  # the server's run ends on its own; the relay's turn is stopped either way

        threading.Thread(target=stop, name=f"oar-stop-{run_id[:40]}", daemon=True).start()
