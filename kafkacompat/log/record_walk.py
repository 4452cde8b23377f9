"""The per-record walk of a produced batch: the compiled one when it was built, else the pure-Python one.

Theory of operation
-------------------
`record_validator._walk` reads every record of every batch that reaches a log, and in pure Python that
loop is most of a broker's CPU time per produced byte (`tools/bench_validator.py`). The C extension
`_record_walk` (`_record_walk.c`, built by `pip install` through setup.py as an optional extension) does
the same walk about two orders of magnitude faster. `walk` is the one the validator calls:
`compiled_walk` when the extension imports, `python_walk` (the reference, `record_validator._walk`)
when it does not (no compiler at install time); which one is in use is logged once, when this module is
first imported (`serve` imports it at start-up).

The boundary keeps every word and error code on the Python side. The extension returns a fault kind,
the index of the record it stopped at and up to two numbers; `_refusal` words the very `InvalidRecords`
that `_walk` raises for that fault. A batch that reads well comes back with its record count, its
largest timestamp delta and the records the caller must judge again (a null key on a compacted topic, a
timestamp outside the window); `compiled_walk` judges those with `_walk`'s own rules and helpers, so key
and timestamp errors are built by the same code either way. `compiled_walk` takes `_walk`'s arguments
and returns what it returns, and `_tests/test_record_walk.py` holds the two to the same verdicts on
generated and broken record streams: a change to the walk's rules or wording is a change to both.

record_validator imports this module, and this module names record_validator's walk and error types
only when called, so either may be imported first.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kafkacompat.log import record_validator as reference
from kafkacompat.wire.errors import ErrorCode

__all__ = ["COMPILED", "Fault", "compiled_walk", "python_walk", "walk", "walk_in_use"]

_log = logging.getLogger(__name__)
_LONG_MIN = -(2**63)
_LONG_MAX = 2**63 - 1

_native: ModuleType | None
try:
    from kafkacompat.log import _record_walk as _native
except ImportError as exc:  # installed without a compiler, or a source tree never installed
    _native = None
    _LOAD_ERROR = str(exc)
else:
    _LOAD_ERROR = ""

#: Whether the compiled walk loaded.
COMPILED = _native is not None


class Fault(enum.IntEnum):
    """The fault kinds of _record_walk.c (its FAULT_* constants)."""

    PREMATURE_EOF = 1
    RUNS_PAST_END = 2
    ENDS_INSIDE_VARINT = 3
    LENGTH_OVERLONG = 4
    VARINT_OVERLONG = 5
    VARLONG_OVERLONG = 6
    VARINT_OVERFLOW = 7
    VARLONG_OVERFLOW = 8
    RECORD_SIZE = 9
    KEY_LENGTH = 10
    VALUE_LENGTH = 11
    VALUE_LENGTH_SHORT = 12
    PAST_RECORD_END = 13
    HEADERS_NEGATIVE = 14
    HEADERS_TOO_MANY = 15
    HEADER_KEY_LENGTH = 16
    HEADER_VALUE_LENGTH = 17
    RECORD_END = 18
    OFFSET_DELTA_INDEX = 19
    OFFSET_DELTA_ORDER = 20
    TRAILING = 21


def _message(fault: Fault, index: int, a: int, b: int, count: int, last_offset_delta: int) -> str:
    """The message `_walk` gives `fault` at record `index` (`a`, `b`: the numbers the extension sent)."""
    match fault:
        case Fault.PREMATURE_EOF:
            return (
                f"Incorrect declared batch size, premature EOF reached: the batch declares {count} records "
                f"but holds {index}"
            )
        case Fault.RUNS_PAST_END:
            return "Found invalid record structure: the record runs past the end of the batch"
        case Fault.ENDS_INSIDE_VARINT:
            return "the record ends inside a varint"
        case Fault.LENGTH_OVERLONG | Fault.VARINT_OVERLONG:
            return "varint is longer than 5 bytes"
        case Fault.VARLONG_OVERLONG:
            return "varlong is longer than 10 bytes"
        case Fault.VARINT_OVERFLOW:
            return "varint overflows int32"
        case Fault.VARLONG_OVERFLOW:
            return "varlong overflows int64"
        case Fault.RECORD_SIZE:
            return (
                f"Invalid record size: expected {a} bytes in record payload, but the records have only {b} "
                "remaining bytes"
            )
        case Fault.KEY_LENGTH:
            return f"invalid key length {a}"
        case Fault.VALUE_LENGTH:
            return f"invalid value length {a}"
        case Fault.VALUE_LENGTH_SHORT:
            return "invalid value length"
        case Fault.PAST_RECORD_END:
            return "Found invalid record structure: the key or value runs past the record's end"
        case Fault.HEADERS_NEGATIVE:
            return f"Found invalid number of record headers {a}"
        case Fault.HEADERS_TOO_MANY:
            return (
                f"Found invalid number of record headers. {a} is larger than the remaining size of the record"
            )
        case Fault.HEADER_KEY_LENGTH:
            return f"Invalid negative header key size {a}"
        case Fault.HEADER_VALUE_LENGTH:
            return f"invalid header value length {a}"
        case Fault.RECORD_END:
            return f"Invalid record size: expected to read {a} bytes in record payload, but instead read {b}"
        case Fault.OFFSET_DELTA_INDEX:
            return f"offset delta {a} where {index} was expected (deltas run 0..count-1)"
        case Fault.OFFSET_DELTA_ORDER:
            return f"offset delta {a} does not increase within [0, {last_offset_delta}]"
        case Fault.TRAILING:
            return (
                f"Incorrect declared batch size, records still remaining in file: {a} bytes after the "
                f"{count} declared records"
            )


def _refusal(
    fault: int, index: int, a: int, b: int, count: int, last_offset_delta: int, plain: bool
) -> reference.InvalidRecords:
    """The `InvalidRecords` `_walk` raises for the fault the extension reported."""
    message = _message(Fault(fault), index, a, b, count, last_offset_delta)
    if fault == Fault.LENGTH_OVERLONG and plain:
        # Kafka reads an uncompressed batch's length varint outside its record reader (see _walk)
        return reference.InvalidRecords(ErrorCode.UNKNOWN_SERVER_ERROR, f"record {index}: {message}")
    return reference.InvalidRecords(
        ErrorCode.INVALID_RECORD, f"record {index}: {message}", [(index, message)]
    )


def _window(low: float, high: float) -> tuple[bool, int, int]:
    """The timestamp window as the extension takes it: whether there is one, and int64 bounds inside
    [low, high] (the extension may flag more records than `_walk` refuses, never fewer)."""
    if low == -math.inf and high == math.inf:
        return False, 0, 0
    lo = _LONG_MIN if low == -math.inf else math.ceil(low)
    hi = _LONG_MAX if high == math.inf else math.floor(high)
    if lo > _LONG_MAX or hi < _LONG_MIN or lo > hi:
        return True, 1, 0  # nothing inside: every record is flagged
    return True, max(lo, _LONG_MIN), min(hi, _LONG_MAX)


def compiled_walk(
    data: bytes | bytearray | memoryview,
    *,
    count: int,
    base_timestamp: int,
    last_offset_delta: int,
    from_client: bool,
    compacted: bool,
    low: float,
    high: float,
    check: reference.TimestampCheck | None,
    plain: bool = False,
    partial: bool = False,
) -> tuple[int, list[tuple[int, str, bool]], int]:
    """`record_validator._walk` through the extension: same arguments, same result, same refusals."""
    if _native is None:
        raise RuntimeError(f"the compiled record walk is not available: {_LOAD_ERROR}")
    window, lo, hi = _window(low, high)
    fault, index, a, b, flagged = _native.walk(
        data, count, base_timestamp, last_offset_delta, from_client, compacted, window, lo, hi, partial
    )
    if fault:
        raise _refusal(fault, index, a, b, count, last_offset_delta, plain)
    errors: list[tuple[int, str, bool]] = []
    if flagged:
        for record, key_null, ts_delta, offset_delta in flagged:
            # _walk's per-record rules, in its order
            if compacted and key_null:
                errors.append((record, reference.KEYLESS, False))
            ts = base_timestamp + ts_delta
            if not low <= ts <= high:
                timestamp_fault = reference._timestamp_fault(ts, offset_delta, check)
                if timestamp_fault is not None:
                    if errors and errors[-1][0] == record:
                        errors.pop()
                    errors.append((record, timestamp_fault, True))
    max_timestamp = max(-1, base_timestamp + a) if index else -1
    return max_timestamp, errors, index


def python_walk(
    data: bytes | bytearray | memoryview, **kwargs: Any
) -> tuple[int, list[tuple[int, str, bool]], int]:
    """The reference: `record_validator._walk` itself."""
    return reference._walk(data, **kwargs)


_Walk = Callable[..., tuple[int, list[tuple[int, str, bool]], int]]

#: The walk the validator uses.
walk: _Walk = compiled_walk if COMPILED else python_walk


def walk_in_use() -> str:
    """One line naming the walk in use, and why when it is the pure-Python one."""
    if COMPILED:
        return "record walk: compiled (kafkacompat.log._record_walk)"
    return f"record walk: pure Python, the compiled helper did not load ({_LOAD_ERROR})"


_log.info("%s", walk_in_use())
