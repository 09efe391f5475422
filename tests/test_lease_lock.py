"""The lease lock in Redis that ingestion and delivery each hold in one process at a time."""

from __future__ import annotations

import secrets

import redis

from oar.core import lease_lock


def _key() -> str:
    return f"oartest{secrets.token_hex(4)}:lease"


def test_one_holder_at_a_time_until_it_gives_the_lock_back(redis_url: str) -> None:
    connection = redis.Redis.from_url(redis_url)
    key = _key()
    first = lease_lock.take(connection, key, 30)
    assert first is not None and first.held
    assert lease_lock.take(connection, key, 30) is None
    assert 0 < connection.ttl(key) <= 30
    first.release()
    assert connection.get(key) is None
    second = lease_lock.take(connection, key, 30)
    assert second is not None and second.held and second.token != first.token
    second.release()


def test_renewing_extends_the_lease(redis_url: str) -> None:
    connection = redis.Redis.from_url(redis_url)
    key = _key()
    lease = lease_lock.take(connection, key, 30)
    assert lease is not None
    connection.expire(key, 2)  # as if most of the lease had passed
    assert lease.renew()
    assert connection.ttl(key) > 2
    lease.release()


def test_a_lapsed_holder_neither_renews_nor_frees_the_next_holders_lock(redis_url: str) -> None:
    connection = redis.Redis.from_url(redis_url)
    key = _key()
    lapsed = lease_lock.take(connection, key, 30)
    assert lapsed is not None
    connection.delete(key)  # its lease ran out
    current = lease_lock.take(connection, key, 30)
    assert current is not None
    connection.expire(key, 2)
    assert not lapsed.renew()
    assert connection.ttl(key) <= 2
    lapsed.release()
    assert connection.get(key) == current.token.encode()
    assert lease_lock.take(connection, key, 30) is None
    current.release()
    assert connection.get(key) is None


def test_without_redis_the_caller_goes_on_unlocked() -> None:
    # Nothing listens on port 1 of loopback: every connection is refused at once.
    connection = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)
    lease = lease_lock.take(connection, _key(), 30)
    assert lease is not None and not lease.held
    assert not lease.renew()
    lease.release()
