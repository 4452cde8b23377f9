"""Types of the compiled record walk (_record_walk.c; record_walk.py explains its results)."""

def walk(
    data: bytes | bytearray | memoryview,
    count: int,
    base_timestamp: int,
    last_offset_delta: int,
    from_client: bool,
    compacted: bool,
    window: bool,
    low: int,
    high: int,
    partial: bool,
    /,
) -> tuple[int, int, int, int, list[tuple[int, int, int, int]] | None]: ...
