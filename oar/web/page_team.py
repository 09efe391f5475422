"""The owner's page for team runs (docs/team-runs.md#the-page): the "Team runs" list, a run's view
and its live endpoint, which answers the regions' versions and the Thoughts broadcast since the
page last asked. Routes of the page's own blueprint, so its sign-in check and CSRF apply.

Thoughts are polled, not streamed: the page already polls, a poll holds none of the web's
threads between answers (an event stream would hold one per open tab for as long as it is open),
and asking every `TEAM_THOUGHTS_POLL_MS` shows a thought within a second.
"""

from __future__ import annotations

from flask import jsonify, render_template, request, url_for
from flask.typing import ResponseReturnValue

from oar.core import defaults
from oar.core.errors import ActionError
from oar.core.numbers import whole_or_refuse
from oar.owner import team_runs
from oar.web import page_views, runtime
from oar.web.page import blueprint, done, form_text, payload_of, refused

__all__ = ["blueprint"]


@blueprint.get("/team-runs")
def team_runs_list() -> ResponseReturnValue:
    listed = team_runs.list_runs(runtime())
    return render_template("team_runs.html", page_kind="team", runs=listed, version=page_views.digest(listed))


@blueprint.get("/live/team-runs")
def live_team_runs() -> ResponseReturnValue:
    return jsonify({"ok": True, "regions": {"runs": page_views.digest(team_runs.list_runs(runtime()))}})


@blueprint.get("/team-runs/<run_id>")
def team_run_page(run_id: str) -> ResponseReturnValue:
    rt = runtime()
    view = team_runs.run_view(rt, run_id)
    return render_template(
        "team_run.html", page_kind="team", run=view, versions=team_runs.run_versions(rt, run_id),
        thoughts=team_runs.recent_thoughts(rt, run_id, 0), poll_ms=defaults.TEAM_THOUGHTS_POLL_MS,
    )


@blueprint.get("/live/team-runs/<run_id>")
def live_team_run(run_id: str) -> ResponseReturnValue:
    rt = runtime()
    since = whole_or_refuse("after", request.args.get("after", "0"), nothing="Give the id of the last thought shown (0 for none).")
    return jsonify({"ok": True, "regions": team_runs.run_versions(rt, run_id),
                    "thoughts": team_runs.recent_thoughts(rt, run_id, since)})


@blueprint.post("/team-runs/memory/export")
def team_memory_export() -> ResponseReturnValue:
    here = url_for("page.team_runs_list")
    try:
        folder, files = team_runs.export_memory(runtime(), payload_of({"folder": form_text("folder").strip()}))
    except ActionError as error:
        return refused(error, here)
    return done(f"Wrote {len(files)} memory file{'' if len(files) == 1 else 's'} to {folder}/.relay/memory.", here)


@blueprint.post("/team-runs/memory/import")
def team_memory_import() -> ResponseReturnValue:
    here = url_for("page.team_runs_list")
    try:
        folder, found = team_runs.import_memory(runtime(), payload_of({"folder": form_text("folder").strip()}))
    except ActionError as error:
        return refused(error, here)
    skipped = f" Skipped: {'; '.join(found.skipped)}." if found.skipped else ""
    return done(f"Read {len(found.imported)} memory file{'' if len(found.imported) == 1 else 's'} from {folder}."
                f"{skipped}", here)
