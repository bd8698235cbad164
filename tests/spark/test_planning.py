"""Driver-side planning without Spark or a broker: options, rate limits, range splits, columns."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronik.spark.arrow_read import _binary
from chronik.spark.options import OptionError, parse_read_options
from chronik.spark.readers import plan_ranges, rate_limit

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9"}

backlogs = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 7)),
    st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)),
    min_size=1,
)


@settings(deadline=None)
@given(backlogs, st.integers(1, 50_000))
def test_rate_limit_stays_in_range_and_shares_the_limit(ranges, limit):
    begin = {tp: lo for tp, (lo, _) in ranges.items()}
    until = {tp: lo + extra for tp, (lo, extra) in ranges.items()}
    out = rate_limit(limit, begin, until)
    assert set(out) == set(until)
    assert all(begin[tp] <= out[tp] <= until[tp] for tp in out)
    backlog = sum(until[tp] - begin[tp] for tp in until)
    taken = sum(out[tp] - begin[tp] for tp in out)
    if backlog <= limit:
        assert out == until
    else:
        # Spark rounds a share below one record up to one, so a partition always moves.
        assert taken <= limit + len(out)
        assert all(out[tp] > begin[tp] for tp in out if until[tp] > begin[tp])


@settings(deadline=None)
@given(backlogs, st.integers(1, 12))
def test_plan_ranges_covers_each_range_exactly(ranges, min_partitions):
    begin = {tp: lo for tp, (lo, _) in ranges.items()}
    until = {tp: lo + extra for tp, (lo, extra) in ranges.items()}
    planned = plan_ranges(begin, until, min_partitions)
    for tp in until:
        pieces = sorted((r.start, r.end) for r in planned if (r.topic, r.partition) == tp)
        covered = [o for s, e in pieces for o in range(s, e)]
        assert covered == list(range(begin[tp], until[tp]))
    assert all(r.end > r.start for r in planned)
    nonempty = sum(1 for tp in until if until[tp] > begin[tp])
    assert len(planned) >= nonempty
    if nonempty == 1 and min_partitions > 1:
        size = next(until[tp] - begin[tp] for tp in until if until[tp] > begin[tp])
        assert len(planned) == min(min_partitions, size)


@settings(deadline=None)
@given(st.lists(st.binary(max_size=40) | st.none(), max_size=200))
def test_binary_column_matches_pyarrow(values):
    assert _binary(values).equals(pa.array(values, pa.binary()))


def test_options_follow_the_kafka_source():
    o = parse_read_options({**BASE, "subscribe": "a, b", "kafka.fetch.wait.max.ms": "7"}, False)
    assert o.subscription.topics == ("a", "b")
    assert o.starting.kind == "earliest" and o.ending.kind == "latest"
    assert o.consumer_config()["fetch.wait.max.ms"] == "7"
    s = parse_read_options({**BASE, "assign": '{"t": [0, 2]}', "maxOffsetsPerTrigger": "9"}, True)
    assert s.starting.kind == "latest" and s.max_offsets_per_trigger == 9
    assert s.subscription.assign == {"t": (0, 2)}
    t = parse_read_options({**BASE, "subscribePattern": "t.*", "startingTimestamp": "5",
                            "startingOffsets": "earliest"}, True)
    assert t.starting.kind == "timestamp" and t.starting.timestamp == 5


@pytest.mark.parametrize("options, streaming, message", [
    ({"subscribe": "a"}, False, "bootstrap.servers"),
    ({**BASE}, False, "exactly one of"),
    ({**BASE, "subscribe": "a", "assign": '{"a":[0]}'}, False, "exactly one of"),
    ({**BASE, "subscribe": "a", "startingOffsets": "latest"}, False, "not allowed"),
    ({**BASE, "subscribe": "a", "endingOffsets": "earliest"}, False, "not allowed"),
    ({**BASE, "subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, False, "-2"),
    ({**BASE, "subscribe": "a", "endingOffsets": "latest"}, True, "batch queries only"),
    ({**BASE, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "positive"),
    ({**BASE, "subscribe": "a", "failOnDataLoss": "maybe"}, True, "true or false"),
    ({**BASE, "assign": "[0]"}, True, "assign"),
    ({**BASE, "subscribe": "a", "reader": "java"}, False, "fetch or librdkafka"),
])
def test_bad_options_are_refused(options, streaming, message):
    with pytest.raises(OptionError, match=message):
        parse_read_options(options, streaming)


def test_patterns_leave_out_internal_topics_and_sink_logs():
    from chronik.spark.options import Subscription
    from chronik.spark.sink_log import log_topic

    every = Subscription(pattern=".*")
    assert every.matches("orders")
    assert not every.matches("__consumer_offsets")
    assert not every.matches(log_topic("query-1"))
    assert Subscription(topics=("__consumer_offsets",)).matches("__consumer_offsets")


def test_options_keep_their_meaning_in_any_case_as_spark_hands_them_over():
    from pyspark.sql.datasource import CaseInsensitiveDict

    from chronik.spark.schema import spark_schema
    from chronik.spark.source import ChronikDataSource

    source = ChronikDataSource(CaseInsensitiveDict(
        {**BASE, "topic": "t", "sinkId": "rm", "batchId": "7", "maxOffsetsPerTrigger": "9",
         "subscribe": "t"}
    ))
    writer = source.writer(spark_schema(False), overwrite=False)
    assert (writer.sink_id, writer.batch) == ("rm", 7)  # else the write is not exactly-once
    assert source.streamWriter(spark_schema(False), overwrite=False).sink_id == "rm"
    assert source.streamReader(spark_schema(False)).options.max_offsets_per_trigger == 9
