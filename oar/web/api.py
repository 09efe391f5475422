"""The agents' API: `POST /api/v1/relay_tool` (docs/calling.md) and an agent's own background tasks."""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue

from oar.actions.context import CallContext
from oar.actions.dispatch import dispatch, short_read_gate
from oar.actions.schema import call_schemas
from oar.background import task_views, tasks
from oar.core import tracing
from oar.core.errors import STATUS_BY_CODE, ActionError, invalid, refusals_ending
from oar.core.fields import Param, check_fields
from oar.core.ratelimit import refuse_over_limit
from oar.core.timeutil import utcnow
from oar.core.waiting import watched_by
from oar.web import runtime
from oar.web.auth import agent_of, require_agent, token_in
from oar.web.bodies import JsonAnswer, json_body, json_of
from oar.web.connection import connection_watch
from oar.web.described import OBJECT, SESSION, TEXT, TEXTS, Operation, described
from oar.web.plain_request import PlainRequest

blueprint = Blueprint("api", __name__)


@blueprint.post("/api/v1/relay_tool")
@described(Operation(
    summary="Call relay_tool: one action and its arguments (docs/calling.md)", caller=SESSION, tag="agents",
    body_choices=call_schemas, choose_by="action", strict=False,
    answer={"relay": TEXT, "summary": TEXT, "ignored": TEXTS},
    # Every refusal an action can give (docs/errors.md); 500 is never meant to happen.
    errors=tuple(sorted({status for status in STATUS_BY_CODE.values() if status < 500} | {502, 503})),
))
def relay_tool() -> ResponseReturnValue:
    # Most calls are answered by `call_lane.CallLane` before Flask; this view answers the rest
    # (a body sent in chunks), the same way.
    return answer_relay_tool(PlainRequest.of_flask()).response()


def answer_relay_tool(http: PlainRequest) -> JsonAnswer:
    """One agent call: its caller by its token, the call run by the dispatcher (which answers
    every refusal of the call itself)."""
    payload = json_of(http.read_body(), current_app.json.loads)
    with short_read_gate(payload):
        try:
            caller = agent_of(token_in(http.headers.get("Authorization")))
        except ActionError as refused:
            return JsonAnswer(refused.to_dict(), refused.status)
        with watched_by(connection_watch(http.environ)):
            ctx = CallContext(runtime=runtime(), caller_session=caller, via="http", trace_carrier=tracing.read_carrier(http.headers))
            status, body = dispatch(ctx, payload)
    return JsonAnswer(body, status)


# An agent's own background tasks (README "Background tasks"). Same token, same JSON shape;
# only the calling session's tasks, and only while the owner setting allow_shell_tasks is on.
TASK_FIELDS = {
    "command": Param("str", required=True, max_length=tasks.MAX_COMMAND_CHARS, description="the command to run"),
    "description": Param("str", max_length=500),
    "type": Param("str", choices=tasks.TYPES),
}


@blueprint.post("/api/v1/tasks")
@described(Operation(
    summary="Start a background task of the calling session", caller=SESSION, tag="tasks", body=TASK_FIELDS,
    status=201, answer={"task": OBJECT}, errors=(400, 403, 409, 429),
))
def start_task() -> ResponseReturnValue:
    caller = require_agent()
    body = json_body()
    if not isinstance(body, dict):
        raise invalid("The body must be a JSON object: {command, description?, type?}. Nothing was run.")
    args, _ignored = check_fields("start task", TASK_FIELDS, body, strict=True, nothing="Nothing was run.")
    # A task start is a write of the conversation, limited as its relay_tool writes are (docs/rules.md#rate-limits).
    refuse_over_limit(runtime(), caller.id, is_write=True, nothing="Nothing was run.")
    task = tasks.start(
        runtime(), caller, args["command"], description=args.get("description"), type=args.get("type", "local_bash")
    )
    return jsonify({"ok": True, "task": task_views.entry(runtime(), task, utcnow(), runtime().settings()["quiet_after_minutes"])}), 201


@blueprint.post("/api/v1/tasks/<task_id>/stop")
@described(Operation(
    summary="Ask one of the calling session's tasks to stop", caller=SESSION, tag="tasks",
    answer={"taskId": TEXT, "stopRequested": {"type": "boolean"}, "status": TEXT}, errors=(400, 403, 404, 429),
))
def stop_task(task_id: str) -> ResponseReturnValue:
    caller = require_agent()
    with refusals_ending("Nothing was stopped."):
        task = tasks.find(caller, task_id, runtime().relay_name())
    refuse_over_limit(runtime(), caller.id, is_write=True, nothing="Nothing was stopped.")
    stopping = tasks.request_stop(runtime(), task)
    return jsonify({"ok": True, "taskId": task.id, "stopRequested": stopping, "status": tasks.status_now(task.id)})
