"""Client quotas: Kafka's rate and throttle-time arithmetic, entity matching in Kafka's
order of precedence, the DescribeClientQuotas filter and AlterClientQuotas validation."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from chronik.broker.config import ConfigError
from chronik.broker.quota_manager import ClientQuotas, Rate, match
from chronik.security.quota_configs import (
    DEFAULT,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    QuotaError,
    QuotaFile,
    desanitize,
    describe,
    entity_of,
    entity_path,
    parse_path,
    quota_value,
    sanitize,
)

PRODUCE, FETCH = "producer_byte_rate", "consumer_byte_rate"


# -- Kafka's Rate ------------------------------------------------------------------------


def test_a_first_record_is_spread_over_num_minus_one_windows() -> None:
    rate = Rate(11, 1000)
    rate.record(1000, 0)
    assert rate.window_size(0) == 10_000
    assert rate.measure(0) == pytest.approx(100.0)
    # Half a window later: 10.5 s.
    assert rate.window_size(500) == 10_500


def test_throttle_time_is_kafkas_formula() -> None:
    rate = Rate(11, 1000)
    # 2000 bytes at once against 100 B/s: O = 200 B/s over W = 10 s; X = (O - T) / T * W.
    assert rate.record_and_throttle(2000, 0, 100.0) == 10_000
    # Within the quota: no throttle.
    assert Rate(11, 1000).record_and_throttle(900, 0, 100.0) == 0


def test_old_samples_expire() -> None:
    rate = Rate(11, 1000)
    rate.record(5000, 0)
    rate.record(5000, 1500)
    # 1.5 s elapsed, one whole window: 9 more are assumed, 10.5 s in all.
    assert rate.measure(1500) == pytest.approx(10_000 / 10.5)
    # Eleven windows after the last event every sample is obsolete.
    assert rate.measure(1500 + 11_000) == 0.0


def test_the_window_grows_past_num_minus_one_samples() -> None:
    rate = Rate(11, 1000)
    for second in range(20):
        rate.record(100, second * 1000)
    # num + 1 samples are kept, but the one whose last event is num windows old is
    # obsolete: the rate is over the last 10 s and their 11 records.
    assert rate.window_size(19_000) == 10_000
    assert rate.measure(19_000) == pytest.approx(1100 / 10.0)
    assert len(rate.samples) == 12


def test_a_client_that_waits_its_throttle_time_is_held_at_the_quota() -> None:
    """A producer sending 10 KB requests as soon as it may, against 100 KB/s: after the
    first window span's allowance, the rate it gets is the quota."""
    quotas = _quotas({"clients/p": {PRODUCE: "102400"}})
    now, sent, start_steady = 1_000_000, 0, None
    while now < 1_000_000 + 120_000:
        throttle = quotas.record(PRODUCE, "User:ANONYMOUS", "p", 10_240, now)
        sent += 10_240
        if throttle and start_steady is None:
            start_steady, sent_then = now, sent
        now += max(throttle, 1)
    assert start_steady is not None
    steady = (sent - sent_then) / ((now - start_steady) / 1000)
    # Kafka errs on the slow side: a request is throttled as soon as it goes over.
    assert 0.9 * 102_400 < steady < 1.02 * 102_400
    assert quotas.throttled_total["Produce"] > 0


# -- matching --------------------------------------------------------------------------


PRECEDENCE = [
    (("alice", "app"), ("alice", "app")),
    (("alice", DEFAULT), ("alice", "app")),
    (("alice", None), ("alice", "")),
    ((DEFAULT, "app"), ("alice", "app")),
    ((DEFAULT, DEFAULT), ("alice", "app")),
    ((DEFAULT, None), ("alice", "")),
    ((None, "app"), ("", "app")),
    ((None, DEFAULT), ("", "app")),
]


@pytest.mark.parametrize("position", range(len(PRECEDENCE)))
def test_kafkas_order_of_precedence(position: int) -> None:
    # Every entity from this one down has a quota: this one wins.
    limits = {entity: float(i + 1) for i, (entity, _) in enumerate(PRECEDENCE) if i >= position}
    entity, tags = PRECEDENCE[position]
    assert match(limits, "alice", "app") == (tags, float(position + 1))


def test_no_quota_matches_other_names() -> None:
    assert match({("bob", None): 1.0, (None, "other"): 2.0}, "alice", "app") is None


def test_defaults_keep_a_rate_per_user() -> None:
    quotas = _quotas({"users/<default>": {PRODUCE: "1000"}})
    now = 5_000_000
    assert quotas.record(PRODUCE, "User:alice", "a", 20_000, now) > 0
    # Another user under the same default quota has a rate of its own...
    assert quotas.record(PRODUCE, "User:bob", "a", 5_000, now) == 0
    # ...while alice's other client shares hers.
    assert quotas.record(PRODUCE, "User:alice", "b", 1, now) > 0


def test_user_names_are_sanitized_as_kafka_does() -> None:
    assert sanitize("CN=alice,O=acme") == "CN%3Dalice%2CO%3Dacme"
    assert sanitize("a b*~") == "a%20b%2A%7E"
    assert sanitize("<default>") == "%3Cdefault%3E"
    assert desanitize(sanitize("ünï cödé/+*")) == "ünï cödé/+*"
    quotas = _quotas({"users/CN%3Dalice%2CO%3Dacme": {PRODUCE: "10"}})
    assert quotas.limited(PRODUCE, "User:CN=alice,O=acme", "x")
    assert not quotas.limited(FETCH, "User:CN=alice,O=acme", "x")


def test_a_changed_quota_applies_at_once() -> None:
    source = SimpleNamespace(quotas={}, generation=0)
    quotas = ClientQuotas({})
    quotas.use(source)
    assert not quotas.limited(PRODUCE, "User:ANONYMOUS", "c")
    source.quotas = {"clients/c": {PRODUCE: "100"}}
    source.generation += 1
    assert quotas.limited(PRODUCE, "User:ANONYMOUS", "c")
    # Kafka's cap on a fetch: (num - 1) windows of the quota.
    source.quotas = {"clients/c": {FETCH: "100"}}
    source.generation += 1
    assert quotas.max_value_in_window(FETCH, "User:ANONYMOUS", "c") == 1000
    assert not quotas.limited(PRODUCE, "User:ANONYMOUS", "c")


def test_window_settings() -> None:
    quotas = ClientQuotas({"quota.window.num": "3", "quota.window.size.seconds": "2"})
    assert (quotas.num, quotas.window_ms) == (3, 2000)
    with pytest.raises(ConfigError):
        ClientQuotas({"quota.window.num": "0"})


def test_unrecord_takes_back_a_fetch() -> None:
    quotas = _quotas({"clients/c": {FETCH: "100"}})
    now = 9_000_000
    assert quotas.record(FETCH, "User:ANONYMOUS", "c", 5_000, now) > 0
    quotas.unrecord(FETCH, "User:ANONYMOUS", "c", 5_000, now)
    assert quotas.record(FETCH, "User:ANONYMOUS", "c", 500, now) == 0


# -- entities, validation, describe ---------------------------------------------------------


def test_entity_paths() -> None:
    for entity in (("a", None), (None, "c"), ("a", "c"), (DEFAULT, DEFAULT), (DEFAULT, None)):
        assert parse_path(entity_path(entity)) == entity
    assert parse_path("topics/x") is None
    assert parse_path("users/a/clients") is None
    assert entity_of([("user", "a b"), ("client-id", None)]) == ("a%20b", DEFAULT)


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ([], "Invalid empty client quota entity"),
        ([("user", "a"), ("user", "b")], "duplicate entity entry user"),
        ([("group", "a")], "Unhandled client quota entity type: group"),
        ([("user", "")], "Empty user not supported"),
        ([("ip", "127.0.0.1"), ("user", "a")], "Invalid quota entity combination"),
    ],
)
def test_bad_entities(parts: list[tuple[str, str | None]], message: str) -> None:
    with pytest.raises(QuotaError, match=message):
        entity_of(parts)


def test_values() -> None:
    assert quota_value(PRODUCE, 1024.0) == "1024"
    assert quota_value("request_percentage", 12.5) == "12.5"
    for key, value, message in (
        ("nope", 1.0, "Invalid configuration key nope"),
        (PRODUCE, -1.0, "Quota producer_byte_rate must be greater than 0"),
        (FETCH, 0.0, "Quota consumer_byte_rate must be greater than 0"),
        (PRODUCE, 1.5, "Configuration producer_byte_rate must be a Long value"),
        ("SCRAM-SHA-256", 1.0, "Invalid configuration key SCRAM-SHA-256"),
    ):
        with pytest.raises(QuotaError, match=message):
            quota_value(key, value)


STORED = {
    "users/alice": {PRODUCE: "10", "SCRAM-SHA-256": "salt=..."},
    "users/bob": {"SCRAM-SHA-512": "salt=..."},  # credentials only: no quota entity
    "users/alice/clients/app": {FETCH: "20"},
    "users/<default>": {PRODUCE: "30"},
    "users/<default>/clients/<default>": {PRODUCE: "35"},
    "clients/app": {PRODUCE: "40"},
    "clients/<default>": {FETCH: "50"},
}


def _described(components: list[tuple[str, int, str | None]], strict: bool) -> set[tuple]:
    return {tuple(entity) for entity, _ in describe(STORED, components, strict)}


def test_describe_everything() -> None:
    found = describe(STORED, [], False)
    assert len(found) == 6
    assert (
        [("user", "alice")],
        {PRODUCE: 10.0},
    ) in found  # the SCRAM credential is not a quota


def test_describe_filters() -> None:
    alice = ("user", "alice")
    assert _described([("user", MATCH_EXACT, "alice")], True) == {(alice,)}
    assert _described([("user", MATCH_EXACT, "alice")], False) == {
        (alice,),
        (alice, ("client-id", "app")),
    }
    assert _described([("user", MATCH_DEFAULT, None)], True) == {(("user", None),)}
    assert _described([("user", MATCH_EXACT, None)], True) == {(("user", None),)}
    assert _described([("user", MATCH_SPECIFIED, None)], True) == {(alice,), (("user", None),)}
    assert _described([("client-id", MATCH_SPECIFIED, None)], True) == {
        (("client-id", "app"),),
        (("client-id", None),),
    }
    assert _described(
        [("user", MATCH_SPECIFIED, None), ("client-id", MATCH_DEFAULT, None)], True
    ) == {(("user", None), ("client-id", None))}
    assert _described([("ip", MATCH_SPECIFIED, None)], False) == set()


@pytest.mark.parametrize(
    ("components", "code", "message"),
    [
        ([("user", 0, "a"), ("user", 0, "b")], 42, "Duplicate user filter component"),
        ([("", 0, "a")], 42, "Unexpected empty filter component entity type"),
        ([("group", 0, "a")], 35, "Custom entity type 'group' not supported"),
        ([("ip", 2, None), ("user", 2, None)], 42, "Invalid entity filter component"),
        ([("user", 7, None)], 42, "Unexpected match type"),
    ],
)
def test_bad_filters(
    components: list[tuple[str, int, str | None]], code: int, message: str
) -> None:
    with pytest.raises(QuotaError, match=message) as caught:
        describe(STORED, components, False)
    assert caught.value.code == code


def test_the_file_keeps_quotas(tmp_path: Path) -> None:
    store = QuotaFile(tmp_path)
    asyncio.run(store.alter({"users/a": {PRODUCE: "10"}, "clients/<default>": {FETCH: "20"}}))
    asyncio.run(store.alter({"users/a": {PRODUCE: None}}))
    assert store.generation == 2
    again = QuotaFile(tmp_path)
    assert again.quotas == {"clients/<default>": {FETCH: "20"}}


def _quotas(stored: dict[str, dict[str, str]]) -> ClientQuotas:
    quotas = ClientQuotas({})
    quotas.use(SimpleNamespace(quotas=stored, generation=1))
    return quotas
