"""Random operation sequences (hypothesis) against a plain model of the log's contents."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkacompat.log._tests.helpers import all_records, make_batch
from kafkacompat.log.config import LogConfig
from kafkacompat.log.partition_log import PartitionLog

NOW = 1_700_000_100_000

operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4), st.integers(0, 200)),
        st.tuples(st.just("truncate"), st.floats(0, 1)),
        st.tuples(st.just("delete_records"), st.floats(0, 1)),
        st.tuples(st.just("reopen"), st.booleans()),
        st.tuples(st.just("roll"), st.just(0)),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations, segment_bytes=st.sampled_from([1000, 3000, 100_000]))
def test_log_matches_a_model_under_random_operations(ops, segment_bytes):
    directory = tempfile.mkdtemp()
    config = LogConfig.from_properties(
        {"segment.bytes": str(segment_bytes), "index.interval.bytes": "300", "file.delete.delay.ms": "0"}
    )
    # model: the batches ever appended, (base offset, values); `end` and `start` as the log should have them
    batches: list[tuple[int, list[bytes]]] = []
    start = end = 0
    pl = PartitionLog(directory + "/m-0", "m", 0, config, sync=False)
    try:
        for step, op in enumerate(ops):
            if op[0] == "append":
                _, count, size = op
                values = [b"%d:%d:" % (step, i) + b"v" * size for i in range(count)]
                result = pl.append_as_leader(make_batch(values), step, NOW)
                assert result.base_offset == end
                batches.append((end, values))
                end += count
            elif op[0] == "truncate":
                target = max(start + int((end - start) * op[1]), start)
                pl.truncate_to(target, NOW)
                if target < end:
                    # whole batches go: the new end is the base of the batch holding the target
                    holder = next(b for b, v in batches if b <= target < b + len(v))
                    batches = [(b, v) for b, v in batches if b < holder]
                    end = max(holder, start)
            elif op[0] == "delete_records":
                pl.update_high_watermark(pl.log_end_offset)
                target = start + int((end - start) * op[1])
                start = max(start, target)
                assert pl.delete_records_before(target, NOW) == start
            elif op[0] == "reopen":
                clean = op[1]
                pl.close(clean=clean)
                pl = PartitionLog(
                    directory + "/m-0",
                    "m",
                    0,
                    config,
                    clean_shutdown=clean,
                    log_start_offset=start,
                    recovery_point=0,
                    sync=False,
                )
            elif op[0] == "roll":
                pl.roll(NOW)
            pl.run_pending_deletes(NOW)
            assert (pl.log_start_offset, pl.log_end_offset) == (start, end)
            model = {b + i: value for b, values in batches for i, value in enumerate(values) if b + i < end}
            first_kept = pl.segments[0].base_offset
            on_disk = {o: v for o, _, v in all_records(pl.directory)}
            assert on_disk == {o: v for o, v in model.items() if o >= first_kept}
            for offset in range(start, end):
                result = pl.read(offset, 1)
                assert result.first_offset <= offset < result.first_offset + 4
                assert len(result.slices) == 1
    finally:
        pl.close(clean=False)
        shutil.rmtree(directory)
