"""The chaos suite's machinery: a seeded workload of relay actions, and the chaos that kills
the relay's processes and flushes its Redis while the workload runs (tests/test_chaos.py).

The workload runs in one thread, action after action, each one relay call (or owner call);
the chaos runs in another, following a plan drawn from the same seed: at chosen points of
the workload it SIGKILLs web, worker or clock and restarts it after a short downtime, as a
supervisor would, and once it flushes the relay's Redis database. An owner thread allows
every approval card that shows in the Inbox, as an owner at the page would.

A call the web could not answer (killed mid-request, or down) is counted `interrupted` and
not retried: whether it was accepted is read from the database afterwards.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

import requests

from oar.core.timeutil import utcnow
from tests.support.clients import Agent, Owner, poll
from tests.support.relays import CLOCK, WEB, WORKER, RelayStack

T = TypeVar("T")
PARTS = (WEB, WORKER, CLOCK)
# How often each kind of action is drawn.
WEIGHTS = {"send": 40, "create_session": 10, "wait": 12, "schedule": 14, "subscribe": 6, "task": 10, "unschedule": 2}


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Tally:
    """What the workload and the chaos did, for the checks and the printed counts."""

    actions: Counter[str] = field(default_factory=Counter)  # "<kind> <outcome>"
    prompts: dict[str, str] = field(default_factory=dict)  # accepted prompt id → its session
    children: dict[str, list[str]] = field(default_factory=dict)  # desk session → sessions it started
    schedules: dict[str, datetime | None] = field(default_factory=dict)  # schedule id → its `at` (None: recurring)
    tasks: list[str] = field(default_factory=list)
    kills: Counter[str] = field(default_factory=Counter)
    worker_kills: list[datetime] = field(default_factory=list)
    flushes: int = 0
    cards_allowed: int = 0
    schedules_found_afterwards: int = 0  # set by an interrupted call, found by list_schedules
    errors: list[str] = field(default_factory=list)


class Web:
    """Calls through the web, waiting (with a deadline) while it is down."""

    def __init__(self, stack: RelayStack) -> None:
        self.stack = stack

    def wait_until_up(self) -> None:
        def up() -> bool:
            with contextlib.suppress(requests.RequestException):
                return requests.get(f"{self.stack.url}/healthz", timeout=5).status_code == 200
            return False

        poll("the web to answer again", up, seconds=180, every=0.1)


class Workload:
    """`count` actions drawn from `rng` across `desks` (conversations that start sessions and
    set schedules) and `watchers` (conversations that subscribe to the desks' sessions)."""

    def __init__(self, stack: RelayStack, rng: random.Random, desks: list[Agent], watchers: list[Agent],
                 quiet: Agent | None, quiet_hours: dict[str, str] | None, tally: Tally) -> None:
        self.stack, self.rng, self.desks, self.watchers, self.tally = stack, rng, desks, watchers, tally
        self.quiet, self.quiet_hours = quiet, quiet_hours
        self.web = Web(stack)
        self.done = 0  # actions made so far (the chaos plan's clock)
        self.progress = threading.Condition()
        for desk in desks:
            tally.children[desk.session_id] = []

    def run(self, count: int) -> None:
        kinds, weights = zip(*WEIGHTS.items(), strict=True)
        for number in range(count):
            kind = self.rng.choices(kinds, weights)[0]
            desk = self.rng.choice(self.desks)
            try:
                outcome = getattr(self, kind)(number, desk)
            except (requests.RequestException, ValueError):  # the web died under the call
                outcome = "interrupted"
                self.web.wait_until_up()
            self.tally.actions[f"{kind} {outcome}"] += 1
            with self.progress:
                self.done = number + 1
                self.progress.notify_all()
            time.sleep(self.rng.uniform(0, 0.08))  # the workload's pace, so that kills land among its calls

    def wait_for(self, number: int) -> None:
        with self.progress:
            self.progress.wait_for(lambda: self.done >= number, timeout=600)

    # Actions: each returns its outcome ------------------------------------------------------

    def _prompt_text(self, number: int) -> str:
        return f"!sleep {self.rng.choice((0.1, 0.3, 0.6, 1.2))}\naction {number}"

    def _answer(self, kind: str, status: int, body: dict[str, Any]) -> str:
        if body.get("ok") is True:
            return "accepted"
        code = body.get("code", "")
        # The limits a busy relay answers with are the documented refusals (docs/rules.md, docs/schedules.md#limits).
        if code in ("REMOTE_RELAY_SESSION_LIMIT", "REMOTE_RELAY_SCHEDULE_LIMIT", "REMOTE_RELAY_SUBSCRIPTION_LIMIT"):
            return "refused"
        # A desk's HTTP call made while one of its own (scheduled) turns runs waits on its card in
        # that turn, and the card is withdrawn when the turn ends (docs/rules.md#where-a-card-waits).
        if code == "REMOTE_RELAY_APPROVAL_DENIED" and "withdrawn" in body.get("error", ""):
            return "withdrawn"
        self.tally.errors.append(f"{kind}: {status} {body}")
        return "error"

    def send(self, number: int, desk: Agent) -> str:
        children = self.tally.children[desk.session_id]
        if not children:
            return self.create_session(number, desk)
        target = self.rng.choice(children)
        status, body = desk.call("send", relay="this", session=target, text=self._prompt_text(number), wait_seconds=0)
        outcome = self._answer("send", status, body)
        if outcome == "accepted":
            self.tally.prompts[body["message_id"]] = target
        return outcome

    def create_session(self, number: int, desk: Agent) -> str:
        status, body = desk.call("create_session", relay="this", text=self._prompt_text(number),
                                 title=f"child {number}", wait_seconds=0)
        outcome = self._answer("create_session", status, body)
        if outcome == "accepted":
            self.tally.children[desk.session_id].append(body["session"])
            self.tally.prompts[body["message_id"]] = body["session"]
        return outcome

    def wait(self, number: int, desk: Agent) -> str:
        mine = [p for p, s in self.tally.prompts.items() if s in self.tally.children[desk.session_id]]
        if not mine:
            return self.send(number, desk)
        prompt = self.rng.choice(mine)
        status, body = desk.call("wait", relay="this", session=self.tally.prompts[prompt], message_id=prompt,
                                 wait_seconds=0)
        return self._answer("wait", status, body)

    def schedule(self, number: int, desk: Agent) -> str:
        text = f"scheduled {number}\n!sleep 0.2"
        if self.rng.random() < 0.15:  # recurring: every "minute" (SCHEDULE_MINUTE_SECONDS) until unscheduled
            at = None
            status, body = desk.call("schedule", text=text, every_minutes=1)
        else:
            at = utcnow() + timedelta(seconds=self.rng.uniform(1, 12))
            status, body = desk.call("schedule", text=text, at=iso(at))
        outcome = self._answer("schedule", status, body)
        if outcome == "accepted":
            self.tally.schedules[body["schedule_id"]] = at
        return outcome

    def unschedule(self, number: int, desk: Agent) -> str:
        recurring = [s for s, at in self.tally.schedules.items() if at is None]
        if not recurring:
            return self.schedule(number, desk)
        schedule_id = self.rng.choice(recurring)
        return "accepted" if self._unschedule(schedule_id) else "refused"

    def _unschedule(self, schedule_id: str) -> bool:
        """Only the setting conversation ends a schedule; the others are told it is not theirs."""
        return any(agent.call("unschedule", schedule_id=schedule_id)[1].get("ok") is True for agent in self.desks)

    def subscribe(self, number: int, desk: Agent) -> str:
        children = self.tally.children[desk.session_id]
        if not children:
            return self.create_session(number, desk)
        watched = self.rng.sample(children, min(len(children), self.rng.randint(1, 3)))
        if self.quiet is not None and self.rng.random() < 0.3:
            watcher, extra = self.quiet, {"quiet_hours": self.quiet_hours}
        else:  # a digest every N "minutes" (DELIVERY_MINUTE_SECONDS) holds the events
            watcher, extra = self.rng.choice(self.watchers), {"digest_minutes": self.rng.randint(2, 8)}
        status, body = watcher.call("subscribe", sessions=watched, events=["turn_end", "error"], **extra)
        return self._answer("subscribe", status, body)

    def task(self, number: int, desk: Agent) -> str:
        status, body = desk.request("POST", "/api/v1/tasks", {
            "command": f"sleep {self.rng.choice((0.2, 0.5, 1))}", "description": f"task {number}",
        })
        if status == 201 and body.get("ok") is True:
            self.tally.tasks.append(body["task"]["taskId"])
            return "accepted"
        return self._answer("task", status, body)

    def finish(self) -> None:
        """End the recurring schedules the workload left, so that the relay can fall quiet.

        A schedule set by a call whose answer the killed web never sent is found as its agent
        would find it, with list_schedules, and checked with the others afterwards; a recurring
        one of those would otherwise fire for ever."""
        for desk in self.desks:
            listed = self._retried(lambda desk=desk: desk.ok("list_schedules"))["schedules"]
            for entry in listed:
                if entry["id"] not in self.tally.schedules:
                    at = None if entry["everyMinutes"] else datetime.fromisoformat(entry["at"]).replace(tzinfo=None)
                    self.tally.schedules[entry["id"]] = at
                    self.tally.schedules_found_afterwards += 1
        for schedule_id, at in self.tally.schedules.items():
            if at is None:
                assert self._retried(lambda schedule_id=schedule_id: self._unschedule(schedule_id)), schedule_id

    def _retried(self, call: Callable[[], T]) -> T:
        """`call`, made again (up to twice) when a connection the killed web left behind fails."""
        for _ in range(2):
            try:
                return call()
            except requests.RequestException:
                self.web.wait_until_up()
        return call()


@dataclass
class Blow:
    """One point of the chaos plan: after action `at`, kill `part` for `down` seconds (or flush Redis)."""

    at: int
    part: str  # web | worker | clock | redis
    down: float


def plan(rng: random.Random, actions: int, kills_per_part: int) -> list[Blow]:
    blows = [Blow(rng.randint(1, actions - 1), part, rng.uniform(0.2, 2.5)) for part in PARTS for _ in range(kills_per_part)]
    blows.append(Blow(rng.randint(actions // 4, 3 * actions // 4), "redis", 0))
    return sorted(blows, key=lambda blow: blow.at)


class Chaos(threading.Thread):
    """Follows the plan along the workload: SIGKILL and restart, or FLUSHDB."""

    def __init__(self, stack: RelayStack, workload: Workload, blows: list[Blow], tally: Tally) -> None:
        super().__init__(name="chaos", daemon=True)
        self.stack, self.workload, self.blows, self.tally = stack, workload, blows, tally
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            for blow in self.blows:
                self.workload.wait_for(blow.at)
                if blow.part == "redis":
                    self.stack.redis_server.flushdb()
                    self.tally.flushes += 1
                    continue
                self.stack.kill(blow.part)
                if blow.part == WORKER:
                    # Read once the worker is dead (kill reaps it): a turn it was starting as the
                    # signal landed may still have committed its start, and counts as started before.
                    self.tally.worker_kills.append(utcnow())
                self.tally.kills[blow.part] += 1
                time.sleep(blow.down)  # the downtime before the supervisor restarts it
                restart(self.stack, blow.part)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.failure = error


def restart(stack: RelayStack, part: str) -> None:
    if part == WEB:
        stack.start_web()
    elif part == WORKER:
        stack.start_worker()
    else:
        stack.start_clock()


class OwnerAtThePage(threading.Thread):
    """Allows every approval card that waits in the Inbox, until stopped."""

    def __init__(self, owner: Owner, tally: Tally) -> None:
        super().__init__(name="owner", daemon=True)
        self.owner, self.tally = owner, tally
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            with contextlib.suppress(requests.RequestException, ValueError, AssertionError):
                for card in self.owner.get("/api/v1/owner/inbox")["cards"]:
                    if card.get("action") and not card.get("stoppedWaiting"):
                        status, _ = self.owner.request("POST", f"/api/v1/owner/cards/{card['id']}", {"decision": "allow"})
                        self.tally.cards_allowed += status == 200
