"""A real BrokerState in a temp dir for the admin handler tests (no tests here, only the harness).

`AdminHarness` builds the broker's state the way `server.Broker` does (config, LogManager,
LocalMetadata, BrokerState), and `call()` runs a handler the way the connection does: the request is
encoded and decoded with the generated codec of the version under test, and the answer is encoded and
decoded again, so every test also proves the answer is valid on the wire in that version.
`reopen()` shuts the state down cleanly and loads it again from disk (a broker restart).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from kafkacompat.broker.context import ConnectionInfo, RequestContext
from kafkacompat.broker.state import BrokerState
from kafkacompat.config import BrokerConfig, broker_log_config
from kafkacompat.log.manager import LogManager
from kafkacompat.replication.metadata import LocalMetadata
from kafkacompat.wire.messages import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_class,
)
from kafkacompat.wire.records import build_batch

CLUSTER_ID = "admin-test-cluster0000"


class AdminHarness:
    def __init__(self, data_dir: Path, overrides: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.overrides = overrides
        self.state = self._open()

    def _open(self) -> BrokerState:
        config = BrokerConfig.load(
            None, [f"log.dirs={self.data_dir}", "listeners=PLAINTEXT://127.0.0.1:0", *self.overrides]
        )
        log_dirs = [str(path) for path in config.log_dirs]
        metadata = LocalMetadata(log_dirs[0])
        logs = LogManager(log_dirs, broker_log_config(config), config.node_id, CLUSTER_ID, sync=False)
        state = BrokerState(config, logs, metadata, cluster_id=CLUSTER_ID)
        logs.startup({t.name: state.topic_log_config(t) for t in metadata.topics()}, now_ms=state.now_ms())
        for topic in metadata.topics():
            for index in range(topic.partitions):
                if logs.get_log(topic.name, index) is None:
                    logs.create_log(topic.name, index, state.topic_log_config(topic), now_ms=state.now_ms())
        state.endpoints["PLAINTEXT"] = ("127.0.0.1", 19092)
        return state

    def close(self) -> None:
        self.state.logs.shutdown()
        self.state.metadata.commit()

    def reopen(self) -> BrokerState:
        self.close()
        self.state = self._open()
        return self.state

    async def call(self, module: ModuleType, version: int, **fields: Any) -> Any:
        key = module.API_KEY
        body = encode_request(key, version, request_class(key)(**fields))
        request = decode_request(key, version, memoryview(body))
        ctx = RequestContext(
            broker=self.state,
            api_key=key,
            api_version=version,
            correlation_id=7,
            client_id="admin-tests",
            connection=ConnectionInfo("PLAINTEXT", "127.0.0.1:1", 1),
        )
        response = await module.handle(ctx, request)
        wire = b"".join(bytes(chunk) for chunk in encode_response(key, version, response))
        return decode_response(key, version, memoryview(wire))

    def append(self, topic: str, partition: int, count: int, *, leader_epoch: int = 0, **batch: Any) -> int:
        """Append `count` records as one batch and move the high watermark to the log end."""
        partition_log = self.state.partition_log(topic, partition)
        records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(count)]
        batch.setdefault("base_timestamp", self.state.now_ms())
        data = bytearray(build_batch(records, **batch))
        partition_log.append_as_leader(data, leader_epoch, self.state.now_ms())
        partition_log.update_high_watermark(partition_log.log_end_offset)
        return partition_log.log_end_offset
