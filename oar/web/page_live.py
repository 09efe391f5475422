"""The page's live endpoints (docs/owner-api.md#the-page), polled by page.js about once a second:
what changed in a session, the sessions list and the Inbox, by region versions. Routes of the
page's blueprint, so its sign-in guard applies."""

from __future__ import annotations

from flask import jsonify, request
from flask.typing import ResponseReturnValue

from oar.core.timeutil import iso, utcnow
from oar.sessions import session_state, sessions
from oar.web import page_views, runtime
from oar.web.page import blueprint


@blueprint.get("/live/sessions/<session_id>")
def live_session(session_id: str) -> ResponseReturnValue:
    session = sessions.resolve(session_id, runtime().relay_name())
    state = session_state.state_of(session, session_state.is_busy(session))
    return jsonify({
        "ok": True,
        "state": state,
        "inFlight": page_views.in_flight(session),
        "regions": page_views.session_versions(session, state),
        "at": iso(utcnow()),
    })


@blueprint.get("/live/overview")
def live_overview() -> ResponseReturnValue:
    data = page_views.overview(request.args.get("show") == "archived")
    return jsonify({"ok": True, "regions": data["versions"]})


@blueprint.get("/live/inbox")
def live_inbox() -> ResponseReturnValue:
    return jsonify({"ok": True, "regions": page_views.inbox()["versions"]})
