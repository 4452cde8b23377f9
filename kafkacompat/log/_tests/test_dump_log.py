"""`kafkacompat dump-log` output checked against kafka-python's reading of the same files."""

from __future__ import annotations

import io
import os
import re

from kafkacompat.cli import build_parser
from kafkacompat.commands import dump_log
from kafkacompat.log._tests.helpers import batch_positions, make_batch, parse_log_file, segment_logs

NOW = 1_700_000_100_000


def run_dump(*argv: str) -> str:
    args = build_parser("dump-log").parse_args(["dump-log", *argv])
    out = io.StringIO()
    assert dump_log.run(args, out) == 0
    return out.getvalue()


def test_batches_and_records_match_kafka_python(make_log):
    pl = make_log({"index.interval.bytes": "100"})
    for i in range(6):
        batch = make_batch(
            [b"value-%d" % i, b"second"],
            keys=[b"k%d" % i, None],
            producer_id=11,
            producer_epoch=2,
            base_sequence=2 * i,
            compression="gzip" if i % 2 else "none",
            headers=[("h1", b"x")],
        )
        pl.append_as_leader(batch, 5, NOW)
    pl.close(clean=True)
    path = segment_logs(pl.directory)[0]
    text = run_dump("--print-data-log", path)
    batch_lines = [line for line in text.splitlines() if line.startswith("baseOffset:")]
    expected = parse_log_file(path)
    positions = batch_positions(path)
    assert len(batch_lines) == len(expected)
    for line, batch, (position, size, _, _) in zip(batch_lines, expected, positions, strict=True):
        fields = dict(re.findall(r"(\w+): (\S+)", line))
        assert int(fields["baseOffset"]) == batch.base_offset
        assert int(fields["lastOffset"]) == batch.last_offset
        assert int(fields["count"]) == batch.records_count
        assert int(fields["position"]) == position and int(fields["size"]) == size
        assert int(fields["crc"]) == batch.crc and fields["isvalid"] == "true"
        assert int(fields["producerId"]) == 11 and int(fields["producerEpoch"]) == 2
        assert int(fields["partitionLeaderEpoch"]) == 5
        assert fields["compresscodec"] == ("gzip" if batch.compression_type == 1 else "none")
        assert int(fields["CreateTime"]) == batch.max_timestamp
    record_lines = [line for line in text.splitlines() if line.startswith("| offset:")]
    records = [r for b in expected for r in b]
    assert len(record_lines) == len(records)
    for line, record in zip(record_lines, records, strict=True):
        assert line.startswith(f"| offset: {record.offset} CreateTime: {record.timestamp} ")
        assert line.endswith(f"payload: {record.value.decode()}")
        assert ("key: " + record.key.decode()) in line if record.key else " key: " not in line
        assert "headerKeys: [h1]" in line
    (snapshot,) = [n for n in os.listdir(pl.directory) if n.endswith(".snapshot")]
    snapshot_text = run_dump(os.path.join(pl.directory, snapshot))
    assert "producerId: 11 producerEpoch: 2 " in snapshot_text
    assert "firstSequence: 10 lastSequence: 11 lastOffset: 11 offsetDelta: 1 " in snapshot_text


def test_index_files_print_their_entries(make_log):
    pl = make_log({"index.interval.bytes": "100"})
    for i in range(10):
        pl.append_as_leader(make_batch([b"x" * 120], timestamp=1000 + i), 0, NOW)
    pl.close(clean=True)
    base = segment_logs(pl.directory)[0][:-4]
    index_text = run_dump(base + ".index")
    positions = {p[0]: p[3] for p in batch_positions(base + ".log")}
    entries = re.findall(r"offset: (\d+) position: (\d+)", index_text)
    assert entries
    for offset, position in entries:
        assert positions[int(position)] == int(offset)  # each entry names the last offset of its batch
    time_text = run_dump(base + ".timeindex")
    stamps = [(int(t), int(o)) for t, o in re.findall(r"timestamp: (\d+) offset: (\d+)", time_text)]
    assert stamps and stamps[-1] == (1009, 9)
    assert all(1000 + offset == ts for ts, offset in stamps)


def test_damaged_tail_is_reported(make_log, damaged_files_ok):
    pl = make_log()
    pl.append_as_leader(make_batch([b"a"]), 0, NOW)
    pl.close(clean=False)
    path = segment_logs(pl.directory)[0]
    with open(path, "ab") as f:
        f.write(b"\x00" * 30)
    text = run_dump("--deep-iteration", path)
    assert "Found 30 invalid bytes" in text
    assert "| offset: 0 " in text and "payload" not in text
