"""A raw client of the transaction protocol for the differential tests: InitProducerId, Produce of
transactional batches, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn of any
version sent to kafkalog and to Kafka 4.4, every answer written into a *transcript* with the
producer ids as labels (P0, P1, ... in the order they appear), and the batches of a partition as the
log holds them (producer label, epoch, COMMIT/ABORT or data), so two transcripts compare with ``==``."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from kafkalog.record.builder import build_batch
from tests.server.raw import connect, fetch_frame, fetch_response, recv_frame, request_frame, response_of

RETRIABLE = (14, 15, 16, 51)     # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
#                                 CONCURRENT_TRANSACTIONS


class TxnClient:
    """One connection; ``transcript`` collects normalised answers."""

    def __init__(self, port: int, suffix: str = "") -> None:
        self.port = port
        #: the scenario's unique suffix of topic and transactional ids, left out of the transcript
        self.suffix = suffix
        self.sock: socket.socket = connect(port)
        self.correlation = 0
        self.labels: dict[int, str] = {-1: "-1"}
        self.transcript: list[Any] = []
        #: producer label -> next sequence per partition
        self.sequences: dict[tuple[int, int, str, int], int] = {}

    def close(self) -> None:
        self.sock.close()

    def label(self, producer_id: int) -> str:
        if producer_id not in self.labels:
            self.labels[producer_id] = f"P{len(self.labels) - 1}"
        return self.labels[producer_id]

    def note(self, *entry: Any) -> None:
        if self.suffix:
            entry = tuple(e.replace(self.suffix, "") if isinstance(e, str) else e for e in entry)
        self.transcript.append(entry)

    def call(self, api_key: int, version: int, values: dict[str, Any], retry: bool = True) -> Any:
        for _ in range(300):
            self.correlation += 1
            self.sock.sendall(request_frame(api_key, version, self.correlation, values))
            frame = recv_frame(self.sock)
            assert frame is not None, f"the broker closed the connection on api {api_key} v{version}"
            r = response_of(frame, api_key, version)
            if not retry or getattr(r, "error_code", 0) not in RETRIABLE:
                return r
            time.sleep(0.1)
        raise AssertionError(f"api {api_key}: still retriable after 30 s")

    # --- setup ----------------------------------------------------------------------------------

    def find_coordinator(self, key: str, key_type: int = 1) -> None:
        for _ in range(300):
            r = self.call(10, 4, {"key_type": key_type, "coordinator_keys": [key]}, retry=False)
            if r.coordinators[0].error_code == 0:
                return
            time.sleep(0.2)
        raise AssertionError(f"no coordinator for {key}")

    def create_topic(self, name: str, partitions: int) -> None:
        r = self.call(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                          "assignments": [], "configs": []}],
                              "timeout": 30000, "validate_only": False})
        assert r.topics[0].error_code == 0, r.topics[0]
        self.wait_led(name, partitions)

    def wait_led(self, name: str, partitions: int) -> None:
        """Until every partition of ``name`` answers ListOffsets (led: Kafka after a start)."""
        for _ in range(300):        # Kafka: the partitions are led once the metadata is published
            r = self.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": name, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                                              for p in range(partitions)]}]}, retry=False)
            if all(p.error_code == 0 for t in r.topics for p in t.partitions):
                return
            time.sleep(0.1)
        raise AssertionError(f"{name} has no leader")

    # --- the transaction requests, each written down ----------------------------------------------

    def init_producer_id(self, tid: str | None, timeout_ms: int = 60000, expected: tuple[int, int] = (-1, -1),
                         version: int = 5) -> tuple[int, int, int]:
        values: dict[str, Any] = {"transactional_id": tid, "transaction_timeout": timeout_ms}
        if version >= 3:
            values.update({"producer_id": expected[0], "producer_epoch": expected[1]})
        r = self.call(22, version, values)
        out = (int(r.error_code), int(r.producer_id), int(r.producer_epoch))
        self.note("InitProducerId", version, tid, self.label(expected[0]), expected[1],
                  out[0], self.label(out[1]), out[2])
        return out

    def produce(self, tid: str | None, pid: int, epoch: int, topic: str, partition: int, value: bytes,
                version: int = 12, transactional: bool = True, seq: int | None = None) -> int:
        key = (pid, epoch, topic, partition)
        base = self.sequences.get(key, 0) if seq is None else seq
        records = build_batch([(None, value, int(time.time() * 1000), None)], producer_id=pid, producer_epoch=epoch,
                              base_sequence=base, is_transactional=transactional)
        for _ in range(100):
            r = self.call(0, version, {"transactional_id": tid, "acks": -1, "timeout": 30000, "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
            err = int(r.responses[0].partition_responses[0].error_code)
            if err not in (6, 19):    # NOT_LEADER_OR_FOLLOWER, or NOT_ENOUGH_REPLICAS: the transaction
                break                 # coordinator still loading (Kafka after a start)
            time.sleep(0.1)
        if err == 0:
            self.sequences[key] = base + 1
        self.note("Produce", version, tid, self.label(pid), epoch, f"{topic}-{partition}", err)
        return err

    def add_partitions(self, tid: str, pid: int, epoch: int, parts: list[tuple[str, int]],
                       version: int = 3) -> list[int]:
        by_topic: dict[str, list[int]] = {}
        for t, p in parts:
            by_topic.setdefault(t, []).append(p)
        r = self.call(24, version, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                    "v3_and_below_producer_epoch": epoch,
                                    "v3_and_below_topics": [{"name": t, "partitions": ps}
                                                            for t, ps in by_topic.items()],
                                    "transactions": []})
        errs = sorted(int(p.partition_error_code) for t in r.results_by_topic_v3_and_below
                      for p in t.results_by_partition)
        self.note("AddPartitionsToTxn", version, tid, self.label(pid), epoch, errs)
        return errs

    def add_offsets(self, tid: str, pid: int, epoch: int, group: str, version: int = 3) -> int:
        r = self.call(25, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                    "group_id": group})
        self.note("AddOffsetsToTxn", version, tid, self.label(pid), epoch, int(r.error_code))
        return int(r.error_code)

    def txn_offset_commit(self, tid: str, pid: int, epoch: int, group: str, topic: str, offsets: dict[int, int],
                          version: int = 5) -> list[int]:
        for _ in range(300):
            r = self.call(28, version, {"transactional_id": tid, "group_id": group, "producer_id": pid,
                                        "producer_epoch": epoch, "generation_id": -1, "member_id": "",
                                        "group_instance_id": None,
                                        "topics": [{"name": topic, "partitions": [
                                            {"partition_index": p, "committed_offset": o,
                                             "committed_leader_epoch": -1, "committed_metadata": ""}
                                            for p, o in offsets.items()]}]})
            errs = [int(p.error_code) for t in r.topics for p in t.partitions]
            if not set(errs) <= set(RETRIABLE):      # the group's coordinator is loaded
                break
            time.sleep(0.1)
        self.note("TxnOffsetCommit", version, tid, self.label(pid), epoch, errs)
        return errs

    def end_txn(self, tid: str, pid: int, epoch: int, commit: bool, version: int = 5) -> tuple[int, int, int]:
        r = self.call(26, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                    "committed": commit})
        out = (int(r.error_code), int(getattr(r, "producer_id", -1)), int(getattr(r, "producer_epoch", -1)))
        self.note("EndTxn", version, "commit" if commit else "abort", tid, self.label(pid), epoch,
                  out[0], self.label(out[1]), out[2])
        return out

    def committed_offsets(self, group: str, topic: str, partitions: int, wait_stable: bool = True) -> dict[int, int]:
        """OffsetFetch v7 with ``require_stable``; ``wait_stable``: until no partition is
        UNSTABLE_OFFSET_COMMIT (Kafka writes the markers after it answers EndTxn)."""
        for _ in range(300 if wait_stable else 1):
            r = self.call(9, 7, {"group_id": group, "require_stable": True, "groups": [],
                                 "topics": [{"name": topic, "partition_indexes": list(range(partitions))}]})
            if all(p.error_code != 88 for t in r.topics for p in t.partitions):
                break
            time.sleep(0.1)
        out = {int(p.partition_index): (int(p.committed_offset), int(p.error_code))
               for t in r.topics for p in t.partitions}
        self.note("OffsetFetch", out)
        return {p: o for p, (o, _e) in out.items()}

    def stable(self, topic: str, partition: int) -> Any:
        """Fetch ``topic``-``partition`` from offset 0 until its last stable offset is its high
        watermark (Kafka writes a transaction's markers after it answers EndTxn; until then its
        partitions still hold the transaction open): the partition's Fetch answer."""
        for _ in range(100):
            self.correlation += 1
            self.sock.sendall(fetch_frame(12, self.correlation, [(topic, [(partition, 0, 1 << 20)])]))
            frame = recv_frame(self.sock)
            assert frame is not None
            part = fetch_response(frame, 12).responses[0].partitions[0]
            if part.last_stable_offset == part.high_watermark:
                break
            time.sleep(0.1)
        return part

    def batches(self, topic: str, partition: int) -> list[tuple[Any, ...]]:
        """The batches of ``topic``-``partition`` from offset 0 (read_uncommitted): (offset,
        producer label, epoch, "COMMIT"/"ABORT" or the number of records), written down, once the
        partition is :meth:`stable`."""
        part = self.stable(topic, partition)
        data = bytes(part.records or b"")
        out: list[tuple[Any, ...]] = []
        pos = 0
        while pos + 61 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            attrs = struct.unpack_from(">h", data, pos + 21)[0]
            pid, epoch = struct.unpack_from(">qh", data, pos + 43)
            count = struct.unpack_from(">i", data, pos + 57)[0]
            if attrs & 0x20:
                key_type = struct.unpack_from(">h", data, pos + 61 + 7)[0] if count else -1
                what: Any = {0: "ABORT", 1: "COMMIT"}.get(key_type, key_type)
            else:
                what = count
            out.append((base, self.label(pid) if pid >= 0 else "-", epoch, what))
            pos += 12 + length
        self.note("Log", f"{topic}-{partition}", out)
        return out
