"""Kafka's API keys as an IntEnum (`ApiKey.PRODUCE == 0`), generated from the message specs.

tools/gen_messages.py writes the enum (kafkacompat/wire/_generated/api_keys.py) with a member for every
request spec, served by this broker or not.
"""

from __future__ import annotations

from kafkacompat.wire._generated.api_keys import ApiKey

__all__ = ["ApiKey"]
