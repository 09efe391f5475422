"""The `oar` command: `python -m oar <command>` (docs/calling.md#other-surfaces)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from oar import __version__
from oar.cli.relay_database import NoRelayDatabase, open_relay_database, where
from oar.cli.spinner import spinning
from oar.core import logs
from oar.core.config import from_environment
from oar.core.words import plural

# `--revoke` given without a token: every token of `--session`.
ALL_TOKENS = "<all>"

SERVE_DESCRIPTION = """\
The embedded relay in one command: it applies the database's migrations, starts an embedded
Redis (unless REDIS_URL is set), RQ workers, the clock and the web server, prints where it
listens and, the first time, the owner token. Ctrl-C stops it."""

ENVIRONMENT_HELP = """\
Settings come from the environment (README "Configuration", docs/operations.md), e.g.:
  OAR_DATA_DIR   the data dir: SQLite database, embedded Redis, session folders
                 (default: var/ in the checkout, wherever the command is run)
  DATABASE_URL   PostgreSQL instead of SQLite, e.g. postgresql://user@host:5432/oar
  REDIS_URL      an external Redis (default: the embedded one)
  PORT, OAR_HOST where the web server listens (default: 127.0.0.1:8080)
Commands that act on a relay (token, pair, backup, worker, clock) use the relay's data dir or
DATABASE_URL and stop with an error when there is no relay's database there."""

DATA_DIR_HELP = "the relay's data dir (the same as OAR_DATA_DIR; default: var/ in the checkout)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oar", description="OAR Relay: a self-hosted relay for AI agent sessions. Each command's --help says more.",
        epilog=ENVIRONMENT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"oar-relay {__version__}")
    parser.add_argument("--data-dir", metavar="DIR", help=DATA_DIR_HELP)
    commands = parser.add_subparsers(dest="command", metavar="<command>", title="commands")
    commands.add_parser(
        "serve", help="the embedded relay: Redis, worker, clock and web in one command (as python app.py)",
        description=SERVE_DESCRIPTION, epilog=ENVIRONMENT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    worker = commands.add_parser("worker", help="the RQ worker that runs turns and other jobs (one process, jobs in threads)")
    worker.add_argument("--processes", type=int, default=None,
                        help="worker processes (default: OAR_WORKER_PROCESSES, else 1); more than one forks a pool")
    worker.add_argument("--clock", action="store_true",
                        help="run the clock in threads of the worker too (one process only), instead of `oar clock`")
    commands.add_parser("clock", help="the reconciler loop")
    commands.add_parser("migrate", help="apply database migrations")
    token = commands.add_parser("token", help="mint or revoke a token")
    token.add_argument("--owner", action="store_true", help="replace the owner token")
    token.add_argument("--session", help="a new agent token for this session id (with --revoke: revoke all of its tokens)")
    token.add_argument(
        "--revoke", nargs="?", const=ALL_TOKENS, metavar="TOKEN",
        help="revoke this agent token, or with --session and no TOKEN every token of that session",
    )
    # `oar call --help` and `oar call <action> --help` are generated from the action registry.
    pair = commands.add_parser(
        "pair", help="oar pair: a pairing token for another relay; oar pair <url> <token>: pair with that relay"
    )
    pair.add_argument("url", nargs="?", help="the other relay's address (https://…)")
    pair.add_argument("token", nargs="?", help="the pairing token its owner created with oar pair")
    pair.add_argument("--name", help="the name this relay's agents use for it (default: its own name)")
    pair.add_argument("--label", help="with no url: a note on who the new token is for")
    call = commands.add_parser("call", help="call relay_tool: oar call <action> key=value…", add_help=False)
    call.add_argument(
        "-h", "--help", action="store_true", dest="show_help", help="list the actions, or an action's arguments"
    )
    call.add_argument("action", nargs="?")
    call.add_argument("arguments", nargs="*", help="key=value; values are JSON when they parse as JSON")
    mcp = commands.add_parser(
        "mcp", help="serve relay_tool over MCP on stdin/stdout, forwarded to the relay at OAR_URL as OAR_TOKEN's session"
    )
    mcp.add_argument(
        "--tools", choices=("relay", "team"), default=os.environ.get("OAR_MCP_TOOLS") or "relay",
        help="relay: relay_tool (/mcp); team: the team tools (/mcp/team), in the run RELAY_SESSION_ID names "
             "(default: $OAR_MCP_TOOLS, else relay)",
    )
    backup = commands.add_parser(
        "backup", help="copy the relay's SQLite database to a file while it runs (PostgreSQL: pg_dump)",
        description="A consistent copy of the relay's SQLite database, made with SQLite's online backup while the "
                    "relay runs. Restore by putting the copy as oar.db in a data dir (docs/operations.md).",
    )
    backup.add_argument("file", type=Path, help="the backup file to write (it must not exist yet)")
    docs = commands.add_parser("docs", help="print a reference generated from the code: oar docs actions [--write]")
    docs.add_argument("reference", choices=("actions",))
    docs.add_argument("--write", action="store_true", help="write it to the project's docs/ folder instead")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # `oar` alone: what it can do, as a usage mistake
        parser.print_help(sys.stderr)
        return 2
    if args.data_dir:  # the same as OAR_DATA_DIR, for this command and the processes it starts
        os.environ["OAR_DATA_DIR"] = args.data_dir
    logs.configure()
    try:
        return _run(args)
    except NoRelayDatabase as error:
        print(f"oar {args.command}: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader of stdout went away (`oar call … | head`): not an error of the command's.
        # Pointing stdout at /dev/null keeps the interpreter's own flush at exit quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def serve(argv: list[str], prog: str) -> int:
    """`python app.py`: the embedded relay, with `--help`, `--version` and `--data-dir` like `oar serve`."""
    parser = argparse.ArgumentParser(
        prog=prog, description=SERVE_DESCRIPTION + "\n\nThe other commands: python -m oar --help.",
        epilog=ENVIRONMENT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"oar-relay {__version__}")
    parser.add_argument("--data-dir", metavar="DIR", help=DATA_DIR_HELP)
    args = parser.parse_args(argv)
    return main([*(("--data-dir", args.data_dir) if args.data_dir else ()), "serve"])


def _run(args: argparse.Namespace) -> int:
    if args.command == "serve":
        from oar.engine.launcher import main as serve

        return serve()
    if args.command in ("worker", "clock", "migrate"):
        return _process(args.command, args)
    if args.command == "token":
        if args.revoke is not None:
            return _revoke(args.revoke, args.session)
        if args.owner:
            return _owner_token()
        if not args.session:
            print("oar token: give --owner or --session <id>", file=sys.stderr)
            return 2
        return _session_token(args.session)
    if args.command == "pair":
        return _pair(args.url, args.token, args.name, args.label)
    if args.command == "mcp":
        from oar.cli.mcp_stdio import main as serve_mcp

        return serve_mcp(args.tools)
    if args.command == "docs":
        return _docs(args.write)
    if args.command == "backup":
        return _backup(args.file)
    if args.show_help or not args.action:
        return _call_help(args.action, shown_for_mistake=not args.show_help)
    return _call(args.action, args.arguments)


def _process(command: str, args: argparse.Namespace) -> int:
    """`oar worker`, `oar clock`, `oar migrate`: a node of an older version than the database says
    so and exits with status 1 (docs/operations.md#upgrading)."""
    from oar.owner.bootstrap import NewerSchema

    config = from_environment()
    try:
        if command == "worker":
            from oar.engine.worker import MoreThanOneProcess, refuse_clock_beside_pool
            from oar.engine.worker import main as run_worker

            try:
                refuse_clock_beside_pool(config, args.processes, args.clock)
            except MoreThanOneProcess as error:
                print(f"oar worker: {error}", file=sys.stderr, flush=True)
                return 2
            open_relay_database(config)
            run_worker(config, args.processes, with_clock=args.clock)
            return 0
        if command == "clock":
            from oar.engine.clock import main as run_clock

            open_relay_database(config)
            run_clock(config)
            return 0
        return _migrate()
    except NewerSchema as newer:
        print(f"oar {command}: {newer}", file=sys.stderr, flush=True)
        return 1


def _migrate() -> int:
    from oar.core.db import open_database
    from oar.owner.bootstrap import migrate

    config = from_environment()
    open_database(config)
    applied = migrate()
    print(f"applied {len(applied)} migrations: {', '.join(applied)}" if applied else "database is up to date")
    print(f"database: {where(config)}", file=sys.stderr)
    return 0


def _owner_token() -> int:
    """`oar token --owner`: a new owner token, printed once; the old one stops working."""
    from oar.owner.bootstrap import reset_owner_token

    open_relay_database(from_environment())
    print(reset_owner_token())
    return 0


def _session_token(session_id: str) -> int:
    """`oar token --session ID`: a new agent token of that conversation."""
    from oar.core.db import database
    from oar.core.errors import ActionError
    from oar.core.runtime import Runtime
    from oar.owner.conversations import issue_token

    config = from_environment()
    open_relay_database(config)
    with database.connection_context():
        try:
            _session, token = issue_token(Runtime(config, needs_redis=False), session_id)
        except ActionError as error:
            print(f"oar token: {error.message}", file=sys.stderr)
            return 1
    print(token)
    return 0


def _revoke(token: str, session_id: str | None) -> int:
    """`oar token --revoke TOKEN` or `oar token --session ID --revoke`: the token's (or tokens')
    next call is refused with 401."""
    from oar.core.db import database
    from oar.core.errors import ActionError
    from oar.core.runtime import Runtime
    from oar.owner.conversations import revoke_token, revoke_tokens

    if token == ALL_TOKENS and not session_id:
        print("oar token: give --revoke <token>, or --session <id> --revoke for all of a session's tokens", file=sys.stderr)
        return 2
    if token != ALL_TOKENS and session_id:
        print("oar token: give either a token to revoke or --session, not both", file=sys.stderr)
        return 2
    config = from_environment()
    open_relay_database(config)
    runtime = Runtime(config, needs_redis=False)
    with database.connection_context():
        try:
            if token == ALL_TOKENS and session_id:
                session, revoked = revoke_tokens(runtime, session_id)
                print(f"revoked {plural(revoked, 'agent token')} of session {session.id}")
            else:
                session = revoke_token(runtime, token)
                print(f"revoked an agent token of session {session.id}")
        except ActionError as error:
            print(f"oar token: {error.message}", file=sys.stderr)
            return 1
    return 0


def _pair(url: str | None, token: str | None, name: str | None, label: str | None) -> int:
    """`oar pair`: a new pairing token of this relay, printed once; `oar pair <url> <token>`: pair
    this relay with the relay at url (docs/relays.md#pairing)."""
    from oar.core.db import database
    from oar.core.errors import ActionError
    from oar.core.runtime import Runtime
    from oar.federation import peers
    from oar.owner import relays

    if sum(given is None for given in (url, token)) == 1:
        print("oar pair: give both the other relay's url and its pairing token, or neither", file=sys.stderr)
        return 2
    config = from_environment()
    open_relay_database(config)
    runtime = Runtime(config, needs_redis=False)
    with database.connection_context():
        try:
            if url is None:
                row, new_token = relays.create_pairing_token(runtime, {"label": label})
                print(new_token)
                print(f"pairing token {row.id}: enter it with this relay's url on the other relay "
                      "(oar pair <url> <token> there); it is shown only now", file=sys.stderr)
                return 0
            peer = relays.add_relay(runtime, {"url": url, "token": token, "name": name})
        except ActionError as error:
            print(f"oar pair: {error.message}", file=sys.stderr)
            return 1
    view = peers.view(peer)
    print(f'paired with relay "{view["name"]}" at {view["url"]} (version {view["version"]}); agents may: {view["permission"]}')
    return 0


def _call_help(action: str | None, shown_for_mistake: bool) -> int:
    """The actions, or one action's arguments; exit status 2 when shown for a mistake."""
    from oar.actions import reference
    from oar.actions.catalog import load_actions
    from oar.openclaw import params as openclaw

    if action is None:
        print(reference.call_help() + openclaw.call_help(), end="", file=sys.stderr if shown_for_mistake else sys.stdout)
        return 2 if shown_for_mistake else 0
    if action in openclaw.TOOL_NAMES:
        print(openclaw.tool_help(action), end="")
        return 0
    spec = load_actions().get(action)
    if spec is None:
        print(f"oar call: there is no action {action!r}\n", file=sys.stderr)
        print(reference.call_help(), end="", file=sys.stderr)
        return 2
    print(reference.action_help(spec), end="")
    return 0


def _backup(destination: Path) -> int:
    """`oar backup <file>`: the relay's database copied to file, said on stdout with its size."""
    from oar.cli.backup import BackupRefused, back_up

    try:
        pages, size = back_up(from_environment(), destination)
    except BackupRefused as error:
        print(f"oar backup: {error}", file=sys.stderr)
        return 1
    print(f"backed up the relay's database to {destination} ({pages} pages, {size:,} bytes)")
    return 0


def _docs(write: bool) -> int:
    """docs/actions.md, printed or written."""
    from oar.actions import reference

    text = reference.markdown()
    if not write:
        print(text, end="")
        return 0
    reference.DOCS_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {reference.DOCS_FILE.name}")
    return 0


def _argument_value(text: str) -> Any:
    """`key=value`'s value as JSON when it is JSON a relay takes, else the text itself: `NaN`,
    `Infinity` and `1e400` stay text (JSON has no such numbers; the relay names the argument)."""
    try:
        return json.loads(text, parse_constant=_not_json, parse_float=_finite)
    except ValueError:
        return text


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is not a finite number")
    return number


def _call(action: str, pairs: list[str]) -> int:
    """Call relay_tool (or one of OpenClaw's session tools) over HTTP as the session whose token is in OAR_TOKEN."""
    import requests

    from oar.openclaw.params import TOOL_NAMES

    # OpenClaw's tools have routes of their own and take their arguments bare (docs/openclaw.md#where-the-tools-are).
    path = f"/api/v1/openclaw/{action}" if action in TOOL_NAMES else "/api/v1/relay_tool"
    payload: dict[str, Any] = {} if action in TOOL_NAMES else {"action": action}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            print(f"oar call: {pair!r} is not key=value", file=sys.stderr)
            return 2
        payload[key] = _argument_value(value)
    token = os.environ.get("OAR_TOKEN")
    if not token:
        print("oar call: set OAR_TOKEN to a session's agent token", file=sys.stderr)
        return 2
    url = os.environ.get("OAR_URL") or from_environment().base_url
    try:
        with spinning(f"{action} on {url}", sys.stderr):
            response = requests.post(
                f"{url}{path}", json=payload, headers={"Authorization": f"Bearer {token}"}, timeout=3700
            )
    except requests.RequestException as error:
        print(f"oar call: the relay at {url} did not answer: {error}", file=sys.stderr)
        return 1
    print(json.dumps(response.json(), indent=2, ensure_ascii=False))
    return 0 if response.ok else 1
