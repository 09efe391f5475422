"""The built-in offline provider: replies `echo: <prompt>` and runs `!` directives.

A real provider of the product for demos and tests (docs/providers.md). Directives run in order:
`!sleep <s>`, `!stream <n> <ms>`, `!fail <message>`, `!relay <json>`, `!ask <question> |
<option>…` (an `ask_user` card the turn waits on), `!task <command>` (a background
task in the session's cwd, when the owner setting `allow_shell_tasks` is on; the turn goes on),
`!openclaw <tool> <json>` (one of OpenClaw's session tools as this session), `!reply <text>` (the
reply is exactly <text>, the other directives' lines left out), and `!then <text>`:
the session's next prompts are answered exactly `<text>`, one `!then` line each, in order (how a
test plays an agent answering `REPLY_SKIP` or `ANNOUNCE_SKIP`, docs/providers.md#echo).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from oar.core.errors import ActionError
from oar.providers.base import (
    Activity,
    Provider,
    TextDelta,
    TurnControl,
    TurnEvent,
    TurnFailed,
    TurnRequest,
    relay_tool_activity,
)

MAX_SLEEP_SECONDS = 86_400
# `!then <text>`: the answers the session gives its next prompts, kept as a provider note.
THEN = "!then "
SCRIPT_NOTE = "echo_then"
REPLY = "!reply "
MAX_STREAM_CHUNKS = 100_000


class EchoProvider(Provider):
    kind = "echo"
    default_models = ("echo-1", "echo-2")
    default_efforts = ("low", "medium", "high")

    def run_turn(self, request: TurnRequest, control: TurnControl) -> Iterator[TurnEvent]:
        lines = request.prompt.splitlines()
        scripted = [line[len(THEN):].strip() for line in lines if line.startswith(THEN)]
        if scripted:
            control.services.remember(SCRIPT_NOTE, json.dumps(scripted))
        else:
            answer = _next_scripted(control)
            if answer is not None:
                yield TextDelta(answer)
                return
        plain = "\n".join(line for line in lines if not line.startswith("!")).strip()
        # `!reply <text>`: the reply is exactly <text>; the other directives still run, their lines left out.
        exact = [line[len(REPLY):].strip() for line in lines if line == REPLY.strip() or line.startswith(REPLY)]
        if exact:
            if exact[-1]:
                yield TextDelta(exact[-1])
        else:
            yield TextDelta("echo: " + (plain or "done"))
        for line in lines:
            if not line.startswith("!"):
                continue
            name, _, argument = line[1:].partition(" ")
            handler = DIRECTIVES.get(name)
            if handler is None:
                yield TurnFailed(f"Unknown echo directive !{name}. Directives: {', '.join('!' + d for d in DIRECTIVES)}.")
                return
            for event in handler(argument.strip(), control):
                if exact and isinstance(event, TextDelta):
                    continue
                yield event
                if isinstance(event, TurnFailed):
                    return
            if control.cancelled.is_set():
                return


def _next_scripted(control: TurnControl) -> str | None:
    """The next `!then` answer, taken off the session's script (None: no script)."""
    kept = control.services.recall(SCRIPT_NOTE)
    if not kept:
        return None
    try:
        answers = [str(answer) for answer in json.loads(kept)]
    except (ValueError, TypeError):
        answers = []
    if not answers:
        control.services.remember(SCRIPT_NOTE, None)
        return None
    control.services.remember(SCRIPT_NOTE, json.dumps(answers[1:]) if len(answers) > 1 else None)
    return answers[0]


def _sleep(argument: str, control: TurnControl) -> Iterator[TurnEvent]:
    try:
        seconds = float(argument)
    except ValueError:
        seconds = -1
    if not 0 <= seconds <= MAX_SLEEP_SECONDS:
        yield TurnFailed(f"!sleep needs a number of seconds from 0 to {MAX_SLEEP_SECONDS}; got {argument!r}.")
        return
    control.sleep(seconds)


def _stream(argument: str, control: TurnControl) -> Iterator[TurnEvent]:
    parts = argument.split()
    try:
        count, interval_ms = int(parts[0]), float(parts[1])
    except (IndexError, ValueError):
        count, interval_ms = -1, -1
    if not (0 <= count <= MAX_STREAM_CHUNKS and 0 <= interval_ms <= 60_000) or len(parts) != 2:
        yield TurnFailed(f"!stream needs a chunk count (0 to {MAX_STREAM_CHUNKS}) and milliseconds between chunks; got {argument!r}.")
        return
    for number in range(1, count + 1):
        if number > 1 and not control.sleep(interval_ms / 1000):
            return
        yield TextDelta(f"\nchunk {number}")


def _fail(argument: str, control: TurnControl) -> Iterator[TurnEvent]:
    yield TurnFailed(argument or "The turn failed (!fail).")


def _relay(argument: str, control: TurnControl) -> Iterator[TurnEvent]:
    try:
        payload = json.loads(argument)
    except ValueError as error:
        yield TurnFailed(f"!relay needs a JSON object: {error}.")
        return
    if not isinstance(payload, dict):
        yield TurnFailed("!relay needs a JSON object.")
        return
    yield relay_tool_activity(payload)
    result = control.services.call_relay_tool(payload)
    yield TextDelta("\nrelay: " + json.dumps(result, ensure_ascii=False, separators=(",", ":")))


def _ask(argument: str, control: TurnControl) -> Iterator[TurnEvent]:
    question, *options = [part.strip() for part in argument.split("|")]
    if not question:
        yield TurnFailed("!ask needs a question: !ask <question> | <option> | <option>…")
        return
    answer = control.services.ask_user(question, [option for option in options if option])
    if answer is not None:
        yield TextDelta(f"\nanswer: {answer}")


def _task(argument: str, control: TurnControl) -> Iterator[TurnEvent]:
    try:
        task_id = control.services.start_task(argument)
    except ActionError as error:
        yield TurnFailed(f"!task {argument[:200]}: {error.message}")
        return
    yield Activity(f"task {task_id} started")
    yield TextDelta(f"\ntask {task_id} started: {argument}")


def _openclaw(argument: str, control: TurnControl) -> Iterator[TurnEvent]:
    tool, _, text = argument.partition(" ")
    try:
        arguments = json.loads(text or "{}")
    except ValueError as error:
        yield TurnFailed(f"!openclaw needs a tool name and a JSON object: {error}.")
        return
    if not tool or not isinstance(arguments, dict):
        yield TurnFailed("!openclaw needs a tool name and a JSON object: !openclaw sessions_send {…}.")
        return
    yield Activity(f"openclaw {tool[:64]}")
    result = control.services.call_openclaw(tool, arguments)
    yield TextDelta("\nopenclaw: " + json.dumps(result, ensure_ascii=False, separators=(",", ":")))


def _then(argument: str, control: TurnControl) -> Iterator[TurnEvent]:
    """`!then` and `!reply` are read before the turn runs (`run_turn`); here they write nothing."""
    yield from ()


DIRECTIVES = {
    "sleep": _sleep,
    "stream": _stream,
    "fail": _fail,
    "relay": _relay,
    "ask": _ask,
    "task": _task,
    "openclaw": _openclaw,
    "then": _then,
    "reply": _then,
}
