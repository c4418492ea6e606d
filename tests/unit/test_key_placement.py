"""The partitioners prexid recognises hash as their producers do, and misplaced keys are found."""

from __future__ import annotations

import zlib

from prexid.service.sources.key_placement import PARTITIONERS, KeyPlacement, explaining


def test_murmur2_matches_the_java_clients_reference_vectors() -> None:
    # org.apache.kafka.common.utils.UtilsTest: murmur2 of these keys, as signed ints
    for key, signed in (
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
    ):
        assert PARTITIONERS["murmur2"](key, 1 << 31) == (signed & 0xFFFFFFFF) & 0x7FFFFFFF


def test_crc32_and_fnv1a_place_keys_as_librdkafka_and_sarama_do() -> None:
    assert PARTITIONERS["crc32"](b"node-1", 12) == zlib.crc32(b"node-1") % 12
    # FNV-1a 32 of "hello" is 0x4f9f2cab (positive as int32): sarama takes it modulo n
    assert PARTITIONERS["fnv1a"](b"hello", 1000) == 0x4F9F2CAB % 1000


def test_a_topic_placed_by_one_partitioner_is_named_and_a_misplaced_key_reported() -> None:
    n = 8
    placement = KeyPlacement(n_partitions=n)
    keys = [f"node-{i}".encode() for i in range(40)]
    for key in keys:
        assert placement.observe("metrics", PARTITIONERS["murmur2"](key, n), [key]) == []
    misplaced = []
    for key in keys:
        misplaced += placement.observe("logs", PARTITIONERS["crc32"](key, n), [key])
    assert placement.partitioner("metrics") == "murmur2" and placement.partitioner("logs") == "crc32"
    expected = [k for k in keys if PARTITIONERS["murmur2"](k, n) != PARTITIONERS["crc32"](k, n)]
    assert misplaced == expected and len(expected) > 20
    assert placement.observe("logs", PARTITIONERS["crc32"](keys[0], n), [keys[0]]) == []  # reported once


def test_a_producer_choosing_partitions_itself_fits_no_partitioner_and_unkeyed_records_are_skipped() -> None:
    placement = KeyPlacement(n_partitions=4)
    for i in range(20):
        key = f"k{i}".encode()
        wrong = next(p for p in range(4) if not explaining(key, p, 4))
        placement.observe("metrics", wrong, [key, None])
    assert placement.partitioner("metrics") == "unknown"
    assert placement.seen["metrics"] == 20


def test_only_the_first_records_are_looked_at() -> None:
    placement = KeyPlacement(n_partitions=4, sample=10)
    placement.observe("metrics", 0, [f"k{i}".encode() for i in range(100)])
    assert placement.seen["metrics"] == 10
