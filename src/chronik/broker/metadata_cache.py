"""Each topic's encoded Metadata entry, kept until what it shows changes.

An entry is filed under its topic's name and its variant (the response version and the
authorized-operations value it carries) with the stamp of everything else it depends
on: on a single node the topic's id and partition count, in a cluster the topic view's
change stamp (assignment, partition states) and the live brokers' stamp
(chronik.cluster.view). A lookup with another stamp misses, and the entry is encoded
again and replaces the old one.

Bounded: at most VARIANTS_PER_TOPIC entries per topic (the oldest goes first), and the
topics no longer in the cluster or catalog are dropped (`keep_only`), so the cache holds
at most the live topics times the versions and operation sets in use.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable

# Versions x authorized-operation values a topic is asked for at once: clients of two or
# three versions, with and without operations.
VARIANTS_PER_TOPIC = 8

Variant = tuple[int, int]


class TopicEntryCache:
    def __init__(self) -> None:
        self._topics: dict[str, dict[Variant, tuple[Hashable, bytes]]] = {}

    def __len__(self) -> int:
        return len(self._topics)

    def entries(self) -> int:
        return sum(len(variants) for variants in self._topics.values())

    def get(self, name: str, variant: Variant, stamp: Hashable) -> bytes | None:
        variants = self._topics.get(name)
        if variants is None:
            return None
        found = variants.get(variant)
        if found is None or found[0] != stamp:
            return None
        return found[1]

    def put(self, name: str, variant: Variant, stamp: Hashable, data: bytes) -> None:
        variants = self._topics.get(name)
        if variants is None:
            variants = self._topics[name] = {}
        elif variant not in variants and len(variants) >= VARIANTS_PER_TOPIC:
            del variants[next(iter(variants))]
        variants[variant] = (stamp, data)

    def keep_only(self, names: Collection[str]) -> None:
        """Drop the entries of every topic not in ``names`` (deleted topics)."""
        for gone in self._topics.keys() - names:
            del self._topics[gone]
