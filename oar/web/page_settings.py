"""The page's Settings (docs/owner-api.md#the-page): one page of titled sections — providers,
agents and rules, notifications, paired relays, sign-ins, team runs and OpenClaw — whose forms
call the owner services the owner API calls. Routes of the page's blueprint (its CSRF check and
sign-in guard apply); the notifications, relays and OpenClaw sections add theirs in their modules."""

from __future__ import annotations

import shlex
from typing import Any

from flask import flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from oar.core.errors import ActionError, invalid
from oar.core.fields import refuse_unstorable
from oar.owner import conversations, providers, relays, settings, signins
from oar.sessions import visibility
from oar.web import page_environment, page_views, runtime
from oar.web.page import blueprint, comma_list, done, form_text, payload_of, refused, whole_number

SETTING_BOOLS = ("agent_sessions_enabled", "accept_agent_prompts", "allow_shell_tasks", "shell_tasks_via_shell",
                 "tasks_without_sandbox", "tasks_use_network", "team_runs_shared")
SETTING_INTS = ("max_wait_seconds", "max_turn_seconds", "quiet_after_minutes", "rate_calls_per_minute",
                "rate_writes_per_minute", "team_calls_per_minute", "team_writes_per_minute",
                "max_running_tasks_per_session", "max_running_tasks", "max_task_minutes")
SETTING_TEXTS = ("relay_name", "sessions_visibility", "allowed_roots")
# The Settings page's sections that save owner settings, each its own form (a `section` field
# names it), and the settings each one holds: a form changes only its own, so an unticked box
# of one section never clears another's. A form without `section` holds them all.
TEAM_SETTINGS = ("team_runs_shared", "team_calls_per_minute", "team_writes_per_minute")
SETTINGS_SECTIONS = {
    "agents": tuple(name for name in SETTING_BOOLS + SETTING_INTS + SETTING_TEXTS if name not in TEAM_SETTINGS),
    "team": TEAM_SETTINGS,
}
# The owner's sessions_visibility choices as the form names them (docs/rules.md#visibility), widest first.
VISIBILITY_CHOICES = {value: visibility.WHAT_IT_SEES[value] for value in ("all", "agent", "tree", "self")}
PROVIDER_KINDS_OFFERED = ("chat", "responses", "anthropic", "cli", "external", "echo")


def settings_page(status: int = 200, **extra: Any) -> ResponseReturnValue:
    values = extra.pop("values", None) or settings.read_settings(runtime())
    editing = extra.pop("provider_values", None)
    if editing is None and request.args.get("edit"):
        stored = providers.stored_configuration(runtime(), request.args["edit"])
        if stored is not None:
            editing = provider_form_values(request.args["edit"], *stored)
    return render_template(
        "settings.html", page_kind="settings", values=values, providers=page_views.provider_list(),
        provider_values=editing or {"kind": "chat"}, kinds=PROVIDER_KINDS_OFFERED, sign_ins=signins.count(),
        visibilities=VISIBILITY_CHOICES,
        paired=relays.list_relays(runtime()), pairing_tokens=relays.list_pairing_tokens(runtime()), **extra,
    ), status


@blueprint.get("/settings")
def settings_view() -> ResponseReturnValue:
    return settings_page()


def settings_form(names: tuple[str, ...]) -> dict[str, Any]:
    """The settings a form holds, as `PATCH /api/v1/owner/settings` takes them: an unticked box is
    false, a number is read strictly (whole_number), roots are one a line."""
    changes: dict[str, Any] = {}
    for name in names:
        if name in SETTING_BOOLS:
            changes[name] = name in request.form
        elif name in SETTING_INTS:
            changes[name] = whole_number(form_text(name))
        elif name == "allowed_roots":
            changes[name] = [line.strip() for line in form_text(name).splitlines() if line.strip()]
        else:
            changes[name] = form_text(name)
    return changes


@blueprint.post("/settings")
def save_settings() -> ResponseReturnValue:
    section = form_text("section")
    names = SETTINGS_SECTIONS.get(section, SETTING_BOOLS + SETTING_INTS + SETTING_TEXTS)
    changes = settings_form(names)
    try:
        if section and section not in SETTINGS_SECTIONS:
            raise invalid(f"The settings form names no section {section!r} (one of {', '.join(SETTINGS_SECTIONS)}). "
                          "Nothing was changed.")
        refuse_unstorable(changes, "The form holds", "Nothing was changed.", form=True)
        settings.change_settings(runtime(), changes)
    except ActionError as error:
        shown = {**settings.read_settings(runtime()), **changes}
        return settings_page(400, values=shown, settings_error=error.message,
                             settings_section=section if section in SETTINGS_SECTIONS else "agents")
    flash("Settings saved.", "ok")
    anchor = "#team" if section == "team" else "#agents"
    return redirect(url_for("page.settings_view") + anchor, code=303)


def provider_form_values(name: str, kind: str, options: dict[str, Any]) -> dict[str, Any]:
    """A stored provider as the form shows it (never its API key)."""
    return {
        "name": name,
        "kind": kind,
        "base_url": options.get("base_url", ""),
        "models": ", ".join(options.get("models") or []),
        "default_model": options.get("default_model", ""),
        "efforts": ", ".join(options.get("efforts") or []),
        "monthly_token_cap": options.get("monthly_token_cap") or "",
        "command": shlex.join(options.get("command") or []),
        "environment": page_environment.lines(options.get("environment") or {}),
        "editing": True,
    }


@blueprint.post("/settings/providers")
def save_provider() -> ResponseReturnValue:
    shown = {key: form_text(key).strip() for key in
             ("name", "kind", "base_url", "models", "default_model", "efforts", "monthly_token_cap", "command")}
    shown["environment"] = form_text("environment")
    name = shown["name"]
    try:
        fields: dict[str, Any] = {
            "kind": shown["kind"],
            "base_url": shown["base_url"],
            "api_key": form_text("api_key").strip(),  # empty: the stored key is kept
            "models": comma_list(shown["models"]),
            "default_model": shown["default_model"],
            "efforts": comma_list(shown["efforts"]),
            "monthly_token_cap": whole_number(shown["monthly_token_cap"]) if shown["monthly_token_cap"] else None,
            "environment": page_environment.parsed(shown["environment"]),
        }
        if shown["command"]:
            try:
                fields["command"] = shlex.split(shown["command"])
            except ValueError as error:
                raise invalid(f"provider: command is not a valid argument list ({error}). Nothing was changed.") from None
        if not name:
            raise invalid("provider: give the provider a name. Nothing was changed.")
        row, note = providers.save_provider_from_form(runtime(), name, payload_of(fields))
    except ActionError as error:
        # Typed secrets are not shown back, as a typed API key is not: their lines keep the name.
        shown["environment"] = page_environment.without_secret_values(shown["environment"])
        return settings_page(400, provider_values=shown, provider_error=error.message)
    models = ", ".join((row.options or {}).get("models") or []) or "none listed"
    flash(f'Provider "{row.name}" saved. Models: {models}.' + (f" {note}" if note else ""), "ok")
    return redirect(url_for("page.settings_view") + "#providers", code=303)


@blueprint.post("/settings/tokens/revoke")
def revoke_token() -> ResponseReturnValue:
    here = url_for("page.settings_view") + "#access"
    try:
        session = conversations.revoke_given_token(runtime(), payload_of({"token": form_text("token").strip()}))
    except ActionError as error:
        return refused(error, here)
    return done(f"Revoked an agent token of session {session.id[:8]} ({session.title}).", here)


@blueprint.post("/settings/providers/<name>/delete")
def delete_provider(name: str) -> ResponseReturnValue:
    here = url_for("page.settings_view") + "#providers"
    try:
        providers.delete_provider(runtime(), name)
    except ActionError as error:
        return refused(error, here)
    return done(f'Provider "{name}" deleted.', here)
