"""Redis keys, channels and RQ job ids stay exactly as running relays and queued jobs hold them."""

from __future__ import annotations

from oar.core import keys


def test_wake_up_channels_fall_under_the_hubs_pattern() -> None:
    assert keys.wake_pattern("oar") == "oar:wake:*"
    assert keys.turn_channel("oar", "m1") == "oar:wake:turn:m1"
    assert keys.turn_started_channel("oar", "s1") == "oar:wake:started:s1"
    assert keys.card_channel("oar", "c1") == "oar:wake:card:c1"
    assert keys.question_channel("oar", "q1") == "oar:wake:question:q1"
    assert keys.due_channel("oar") == "oar:wake:due"


def test_stop_channels_and_keys_keep_their_strings() -> None:
    assert keys.turn_stop_channel("oar", "m1") == "oar:stop:m1"
    assert keys.task_stop_channel("oar", "t1") == "oar:taskstop:t1"
    assert keys.external_events("oar", "m1") == "oar:external:m1"
    assert keys.provider_note("oar", "s1", "title:x") == "oar:providernote:s1:title:x"
    assert keys.rate_calls("oar", "s1") == "oar:rate:s1:calls"
    assert keys.rate_writes("oar", "s1") == "oar:rate:s1:writes"
    assert keys.rate_calls("oar", "s1", "team") == "oar:rate:team:s1:calls"
    assert keys.rate_writes("oar", "s1", "team") == "oar:rate:team:s1:writes"
    assert keys.wait_slots("oar", "s1") == "oar:waits:s1"
    assert keys.turns_nudge("oar", "s1") == "oar:nudged:s1"
    assert keys.task_nudge("oar", "t1") == "oar:tasknudged:t1"
    assert keys.delivery_lock("oar") == "oar:delivering"


def test_job_ids_keep_their_strings() -> None:
    assert keys.delivery_job_id(1_700_000_000_000) == "dlv-1700000000000"
    assert keys.delivery_job_id(1_700_000_000_000, "-again") == "dlv-1700000000000-again"
    assert keys.schedule_job_id("sch_1", 1_700_000_000_000) == "sch_1-1700000000000"
