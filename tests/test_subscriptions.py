"""Watching sessions over real HTTP with real workers (docs/events.md): subscribe, events, delivery."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rq.job import Job
from rq.registry import FinishedJobRegistry, StartedJobRegistry

from oar.core import jobs
from tests.support.clients import Agent, decide_while_waiting, denied_by_owner, poll
from tests.support.conversations import event_lines, messages_of
from tests.support.relays import Relay, own_relay


def watcher_events(relay: Relay, agent: Agent) -> list[str]:
    return event_lines(relay, agent.session_id)


def test_it_delivers_events_of_two_sessions_in_one_message_read_back_with_read_session(relay: Relay, desk: Agent) -> None:
    first = desk.ok("create_session", relay="this", text="build it", title="Build", wait_seconds=0)
    second = desk.ok("create_session", relay="this", text="review it", title="Review", wait_seconds=0)
    for body in (first, second):
        desk.ok("wait", relay="this", session=body["session"], message_id=body["message_id"], wait_seconds=30)
    watcher = relay.conversation("watcher")
    subscribed = watcher.ok("subscribe", sessions=[first["session"], second["session"]], events=["turn_end"])
    sub = subscribed["subscription"]
    assert sub["id"].startswith("sub_") and sub["scope"] == "sessions"
    assert sub["sessions"] == [{"id": first["session"], "title": "Build"}, {"id": second["session"], "title": "Review"}]
    desk.ok("send", relay="this", session=first["session"], text="step two", wait_seconds=0)
    desk.ok("send", relay="this", session=second["session"], text="step three", wait_seconds=0)
    [message] = poll("one delivered message", lambda: watcher_events(relay, watcher), seconds=30)
    lines = message.splitlines()
    assert lines[0] == "[relay event · automated message from OAR, not from the user; it approves nothing]"
    assert sorted(lines[1:]) == sorted([
        f'[relay event] session "Build" ({first["session"][:4]}…): turn_end (done) "echo: step two"',
        f'[relay event] session "Review" ({second["session"][:4]}…): turn_end (done) "echo: step three"',
    ])
    read = desk.ok("read_session", relay="this", session=watcher.session_id)
    assert any(m.get("text", "").startswith("[relay event ·") for m in read["messages"]), read
    listed = watcher.ok("list_subscriptions")["subscriptions"]
    assert listed[0]["heldCount"] == 0 and listed[0]["nextDeliveryAt"] is None


def turn_jobs_of(relay: Relay, session_id: str) -> list[str]:
    """The ids of the turn jobs Redis holds for the session: queued, running, or finished in
    the last `jobs.TURN_JOB_KEPT_SECONDS`."""
    queue, connection = relay.runtime.queue, relay.runtime.redis
    held = [*queue.job_ids, *StartedJobRegistry(queue=queue).get_job_ids(), *FinishedJobRegistry(queue=queue).get_job_ids()]
    return [job.id for job in Job.fetch_many(held, connection=connection)
            if job is not None and job.func_name == jobs.RUN_TURNS and job.args == (session_id,)]


def test_a_busy_watcher_takes_its_delivery_as_its_turn_ends_without_a_job_of_its_own(relay: Relay, desk: Agent) -> None:
    build = desk.ok("create_session", relay="this", text="hello", title="Build", wait_seconds=30)
    watcher = relay.conversation("watcher")
    watcher.ok("subscribe", sessions=[build["session"]], events=["turn_end"])
    sleeping = desk.ok("send", relay="this", session=watcher.session_id, text="!sleep 60", wait_seconds=0)["message_id"]
    poll("the watcher's turn running", lambda: [
        m for m in messages_of(relay, watcher.session_id) if m["id"] == sleeping and m["status"] == "running"])
    [running_job] = turn_jobs_of(relay, watcher.session_id)
    desk.ok("send", relay="this", session=build["session"], text="step two", wait_seconds=30)
    [delivered] = poll("the event queued behind the turn", lambda: [
        m for m in messages_of(relay, watcher.session_id) if m["role"] == "event"])
    assert delivered["status"] == "queued"
    assert turn_jobs_of(relay, watcher.session_id) == [running_job]
    assert desk.ok("stop", relay="this", session=watcher.session_id)["stopRequested"]
    answered = desk.ok("wait", relay="this", session=watcher.session_id, message_id=delivered["id"], wait_seconds=30)
    assert answered["status"] == "done" and "step two" in answered["reply"]["text"], answered


def test_a_question_is_urgent_and_once_ends_the_subscription(relay: Relay, desk: Agent) -> None:
    body = desk.ok("create_session", relay="this", text="hello", title="Asker", wait_seconds=30)
    watcher = relay.conversation("watcher")
    sub = watcher.ok("subscribe", sessions=[body["session"]], once=True)["subscription"]
    assert sub["events"] == ["question_asked", "error", "turn_end", "subagent_finished", "task_failed", "stalled", "all_idle"]
    desk.ok("send", relay="this", session=body["session"], text="!ask Ship it? | Yes | No", wait_seconds=0)
    [message] = poll("the question delivered", lambda: watcher_events(relay, watcher), seconds=30)
    assert 'question_asked q_' in message and '"Ship it?"' in message
    [ended] = watcher.ok("list_subscriptions")["subscriptions"]
    assert ended["endReason"] == "fired" and ended["endedAt"]


def test_own_waited_prompts_do_not_wake_the_watcher_twice(relay: Relay, desk: Agent) -> None:
    body = desk.ok("create_session", relay="this", text="hello", title="Helper", wait_seconds=30)
    desk.ok("subscribe", sessions=[body["session"]], events=["turn_end"])
    done = desk.ok("send", relay="this", session=body["session"], text="waited", wait_seconds=30)
    assert done["status"] == "done"
    owner = relay.conversation("owner-side")
    owner.ok("send", relay="this", session=body["session"], text="not mine", wait_seconds=30)
    [message] = poll("only the other turn delivered", lambda: watcher_events(relay, desk), seconds=30)
    assert '"echo: not mine"' in message and "waited" not in message


def test_a_subscription_watches_from_when_it_is_written_not_from_when_its_call_began(relay: Relay, desk: Agent) -> None:
    """A subscribe that waits on its card starts watching when the Allow lets it be written: an
    event the engine took in meanwhile is before it, and every event after it is delivered."""
    build = desk.ok("create_session", relay="this", text="hello", title="Build", wait_seconds=30)
    early = relay.conversation("early")  # keeps the engine reading events while the card waits
    early.ok("subscribe", sessions=[build["session"]], events=["turn_end"])
    watcher = relay.conversation("watcher", approvals=())
    sent: dict[str, Any] = {}

    def turn_ends_and_is_taken_in() -> None:
        sent.update(desk.ok("send", relay="this", session=build["session"], text="while the card waits", wait_seconds=30))
        poll("the event taken in and delivered to the early watcher", lambda: [
            line for line in watcher_events(relay, early) if "while the card waits" in line], seconds=30)

    _card, status, body = decide_while_waiting(
        relay.owner, watcher, "allow", "subscribe", meanwhile=turn_ends_and_is_taken_in,
        sessions=[build["session"]], events=["turn_end"],
    )
    assert status == 200 and body["ok"] is True, body
    shown = desk.ok("read_session", relay="this", session=build["session"])["messages"]
    written_meanwhile = next(m for m in shown if m["id"] == sent["reply"]["messageId"])
    assert body["subscription"]["createdAt"] > written_meanwhile["createdAt"], (body["subscription"], written_meanwhile)
    desk.ok("send", relay="this", session=build["session"], text="after the allow", wait_seconds=30)
    [message] = poll("the event after the Allow delivered", lambda: watcher_events(relay, watcher), seconds=30)
    assert '"echo: after the allow"' in message and "while the card waits" not in message, message


def test_archiving_a_named_session_ends_the_subscription(relay: Relay, desk: Agent) -> None:
    body = desk.ok("create_session", relay="this", text="hello", title="Gone", wait_seconds=30)
    watcher = relay.conversation("watcher")
    watcher.ok("subscribe", sessions=[body["session"]])
    watcher.ok("subscribe", sessions=["all"], exclude=[body["session"]])
    desk.ok("archive", relay="this", session=body["session"])
    listed: list[dict[str, Any]] = watcher.ok("list_subscriptions")["subscriptions"]
    assert [entry.get("endReason") for entry in listed] == ["archived", None]


def test_unsubscribe_all_and_a_denied_transfer_change_nothing(relay: Relay, desk: Agent) -> None:
    body = desk.ok("create_session", relay="this", text="hello", wait_seconds=30)
    watcher = relay.conversation("watcher")
    for _ in range(2):
        watcher.ok("subscribe", sessions=[body["session"]])
    assert len(watcher.ok("unsubscribe", subscription_id="all")["ended"]) == 2
    assert [e["endReason"] for e in watcher.ok("list_subscriptions")["subscriptions"]] == ["unsubscribed"] * 2
    watcher.ok("subscribe", sessions=[body["session"]])
    # Always a card; over HTTP the waiting call shows it, and the owner denies it.
    refused = denied_by_owner(relay.owner, desk, "transfer_subscriptions", **{"from": watcher.session_id})[1]
    assert refused["error"].endswith("Nothing was transferred.")
    assert len(desk.ok("list_subscriptions", watcher=watcher.session_id)["subscriptions"]) == 3
    assert desk.ok("list_subscriptions")["subscriptions"] == []


def test_a_pattern_that_backtracks_without_end_holds_up_no_other_watchers_events(tmp_path: Path) -> None:
    """A /regex/ match is one agent's pattern run on lines other agents write (docs/events.md#subscriptions):
    `/(a|aa)+b/` on a title of 60 a's backtracks for longer than anyone waits. It matches nothing, and
    the other watchers' events, matched after it, arrive; a pattern that does match still does."""
    with own_relay(tmp_path, worker_processes=1) as stack:
        assert stack.relay is not None
        relay = stack.relay
        mallory, alice = relay.conversation("mallory"), relay.conversation("alice")
        build = relay.conversation("Nightly build")
        alice.ok("subscribe", sessions=[build.session_id], events=["turn_end"], match="/night(ly)? BUILD/")
        bait = mallory.ok("create_session", relay="this", text="hi", title="a" * 60, wait_seconds=30)["session"]
        mallory.ok("subscribe", sessions=[bait], events=["turn_end"], match="/(a|aa)+b/")
        mallory.ok("send", relay="this", session=bait, text="again", wait_seconds=30)  # its turn_end, matched first
        relay.owner.post(f"/api/v1/owner/sessions/{build.session_id}/messages", {"text": "build it"})
        [line] = poll("alice's event, matched after mallory's", lambda: watcher_events(relay, alice), seconds=60)
        assert '"Nightly build"' in line and "turn_end (done)" in line, line
        assert watcher_events(relay, mallory) == []
