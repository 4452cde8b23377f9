"""Kafka error codes and the two exceptions the wire and storage layers raise.

`ErrorCode` is generated from Kafka's error table (tools/gen_errors.py). `KafkaError` carries a code
that a handler puts straight into its response. `DecodeError` means the bytes on the wire do not form
a valid message: the connection that sent them is closed, as Kafka closes it.
"""

from __future__ import annotations

from kafkacompat.wire._generated.error_codes import RETRIABLE, ErrorCode

__all__ = ["RETRIABLE", "DecodeError", "ErrorCode", "KafkaError"]


class KafkaError(Exception):
    """A failure that maps to one Kafka error code in a response."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        self.code = ErrorCode(code)
        self.message = message
        super().__init__(f"{self.code.name}: {message}" if message else self.code.name)

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE


class DecodeError(ValueError):
    """Malformed bytes: a truncated frame, a bad length or varint, an unknown key or version.

    `api_key` and `field` say where decoding stopped when that is known.
    """

    def __init__(self, message: str, *, api_key: int | None = None, field: str | None = None) -> None:
        self.api_key = api_key
        self.field = field
        where = []
        if api_key is not None:
            where.append(f"api_key={api_key}")
        if field is not None:
            where.append(f"field={field}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
