"""A small synchronous Kafka client for kafkacompat's own command line tools.

Theory of operation
-------------------
`KafkaClient` speaks the Kafka protocol over plain blocking sockets with the generated codecs
(`kafkacompat.wire.messages`) and headers (`kafkacompat.wire.header`). On the first connection to each
broker it asks ApiVersions and then sends every request in the highest version both sides know, capped
per API where the tools fill in fields only up to some version (`VERSION_CAPS`, e.g. Fetch and Produce
name topics rather than ids). Requests on one connection are strictly one at a time: send, then read
the frame whose correlation id matches. Partition leaders come from Metadata; `send(..., node_id=N)`
opens (and keeps) a connection to broker N.

It is not a general client: no retries beyond what a tool asks for, no pipelining. TLS and SASL
(PLAIN, SCRAM) come from a `--command-config` file (kafkacompat.security.client_auth). Errors
from the network or from a malformed answer raise `ClientError`; Kafka error codes in an answer are the
caller's to read. An answer whose length prefix no Kafka answer has (an HTTP server's "HTTP" read as a
size) is a ClientError saying that the server does not speak the Kafka protocol. Works against any
Kafka-compatible broker, not only kafkacompat.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from kafkacompat.security.client_auth import ClientSecurity
from kafkacompat.wire.header import RequestHeader, decode_response_header, encode_request_header
from kafkacompat.wire.messages import API_SPECS, decode_response, encode_request, request_class

__all__ = ["DEFAULT_BOOTSTRAP", "ClientError", "KafkaClient", "parse_bootstrap"]

DEFAULT_BOOTSTRAP = "localhost:9092"
MAX_RESPONSE_BYTES = 512 * 1024 * 1024

API_VERSIONS = 18
METADATA = 3
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
AUTO_CREATE_WAIT_SECONDS = 10.0
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

# api key -> highest version the tools build requests for (fields beyond it are not filled in)
VERSION_CAPS: dict[int, int] = {
    0: 9,  # Produce: v10+ carries nothing the tools need; v13 names topics by id
    1: 12,  # Fetch: v13+ names topics by id
    3: 12,  # Metadata
    20: 5,  # DeleteTopics: v6 switches to (name, id) pairs
    18: 3,  # ApiVersions
}

_SIZE = struct.Struct(">i")


class ClientError(Exception):
    """A network failure or an answer that cannot be read."""


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """ "host:port,host2:port2" -> [(host, port), ...] (IPv6 hosts in brackets)."""
    result = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ClientError(f"bootstrap server {item!r} is not host:port")
        result.append((host.strip("[]") or "localhost", int(port)))
    if not result:
        raise ClientError("no bootstrap server given")
    return result


class BrokerConnection:
    """One blocking socket to one broker, with the API versions that broker serves."""

    def __init__(
        self, host: str, port: int, client_id: str, timeout: float, security: ClientSecurity | None = None
    ) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout = timeout
        self.security = security
        self.sock = self._connect()
        self._correlation = 0
        self.versions: dict[int, tuple[int, int]] = {}
        self._negotiate()
        if security is not None and security.sasl:
            self._authenticate(security)

    def _connect(self) -> socket.socket:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as exc:
            raise ClientError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.security is not None and self.security.tls:
            try:
                sock = self.security.wrap(sock, self.host)
            except (OSError, ValueError) as exc:
                sock.close()
                raise ClientError(f"TLS handshake with {self.host}:{self.port} failed: {exc}") from exc
        return sock

    def _authenticate(self, security: ClientSecurity) -> None:
        """SaslHandshake v1 then SaslAuthenticate, as the Java client does (KIP-152)."""
        handshake = self.send(SASL_HANDSHAKE, 1, request_class(SASL_HANDSHAKE)(mechanism=security.mechanism))
        if handshake.error_code != 0:
            raise ClientError(
                f"SASL mechanism {security.mechanism} refused by {self.host}:{self.port} "
                f"(enabled: {', '.join(handshake.mechanisms)})"
            )

        def authenticate(token: bytes) -> bytes:
            answer = self.send(SASL_AUTHENTICATE, 1, request_class(SASL_AUTHENTICATE)(auth_bytes=token))
            if answer.error_code != 0:
                raise ClientError(f"SASL authentication failed: {answer.error_message}")
            return bytes(answer.auth_bytes)

        try:
            security.exchange(authenticate)
        except ValueError as exc:
            raise ClientError(f"SASL authentication failed: {exc}") from exc

    def _negotiate(self) -> None:
        request = request_class(API_VERSIONS)(
            client_software_name="kafkacompat-cli", client_software_version="1.0"
        )
        try:
            response = self.send(API_VERSIONS, 3, request)
        except ClientError:
            # A broker older than ApiVersions v3 answers UNSUPPORTED_VERSION in the v0 layout, which
            # does not decode as v3: start over on a fresh connection and ask in v0.
            self.close()
            self.sock = self._connect()
            response = self.send(API_VERSIONS, 0, request_class(API_VERSIONS)())
        if response.error_code != 0:
            # UNSUPPORTED_VERSION in a readable answer: ask again in v0
            response = self.send(API_VERSIONS, 0, request_class(API_VERSIONS)())
        if response.error_code != 0:
            raise ClientError(f"ApiVersions failed with error {response.error_code}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    def version_for(self, api_key: int, cap: int | None = None) -> int:
        """Highest version of `api_key` that the broker, our codecs and the tools all support."""
        spec = API_SPECS[api_key]
        served = self.versions.get(api_key)
        if served is None:
            raise ClientError(f"the broker at {self.host}:{self.port} does not serve {spec.name}")
        high = min(served[1], spec.max_version, VERSION_CAPS.get(api_key, spec.max_version))
        if cap is not None:
            high = min(high, cap)
        low = max(served[0], spec.min_version)
        if high < low:
            raise ClientError(f"no {spec.name} version in common with the broker at {self.host}:{self.port}")
        return high

    def _write(self, api_key: int, version: int, request: Any) -> int:
        self._correlation += 1
        correlation_id = self._correlation
        header = encode_request_header(RequestHeader(api_key, version, correlation_id, self.client_id))
        body = encode_request(api_key, version, request)
        self.sock.sendall(_SIZE.pack(len(header) + len(body)) + header + body)
        return correlation_id

    def send_without_answer(self, api_key: int, version: int, request: Any) -> None:
        """Send a request that gets no answer (acks=0 Produce)."""
        try:
            self._write(api_key, version, request)
        except OSError as exc:
            raise ClientError(f"{self.host}:{self.port}: {exc}") from exc

    def send(self, api_key: int, version: int, request: Any) -> Any:
        try:
            correlation_id = self._write(api_key, version, request)
            frame = self._read_frame()
        except OSError as exc:
            raise ClientError(f"{self.host}:{self.port}: {exc}") from exc
        response_header, offset = decode_response_header(api_key, version, frame)
        if response_header.correlation_id != correlation_id:
            raise ClientError(
                f"answer for correlation id {response_header.correlation_id}, expected {correlation_id}"
            )
        try:
            return decode_response(api_key, version, memoryview(frame)[offset:])
        except ValueError as exc:
            raise ClientError(f"cannot decode the {API_SPECS[api_key].name} answer: {exc}") from exc

    def _read_exactly(self, count: int) -> bytearray:
        buf = bytearray(count)
        view = memoryview(buf)
        got = 0
        while got < count:
            n = self.sock.recv_into(view[got:])
            if n == 0:
                raise ClientError(f"{self.host}:{self.port} closed the connection")
            got += n
        return buf

    def _read_frame(self) -> bytearray:
        head = self._read_exactly(4)
        (size,) = _SIZE.unpack(head)
        if size < 4 or size > MAX_RESPONSE_BYTES:
            # no Kafka answer is that size: another protocol's bytes read as a length ("HTTP" is 1213486160)
            shown = f" (its answer begins {bytes(head)!r})" if bytes(head).isascii() else ""
            raise ClientError(
                f"the server at {self.host}:{self.port} does not speak the Kafka protocol: it answered "
                f"with a frame of {size} bytes{shown}"
            )
        return self._read_exactly(size)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class KafkaClient:
    """Requests to a cluster: bootstrap connection plus one connection per broker it needs."""

    def __init__(
        self,
        bootstrap_servers: str = DEFAULT_BOOTSTRAP,
        *,
        client_id: str = "kafkacompat-cli",
        timeout: float = 30.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.client_id = client_id
        self.timeout = timeout
        self.security = security
        self._brokers: dict[int, tuple[str, int]] = {}
        self._connections: dict[int, BrokerConnection] = {}
        errors = []
        self._bootstrap: BrokerConnection | None = None
        for host, port in parse_bootstrap(bootstrap_servers):
            try:
                self._bootstrap = BrokerConnection(host, port, client_id, timeout, security)
                break
            except ClientError as exc:
                errors.append(str(exc))
        if self._bootstrap is None:
            raise ClientError("; ".join(errors))

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
        if self._bootstrap is not None:
            self._bootstrap.close()

    def connection(self, node_id: int | None = None) -> BrokerConnection:
        if node_id is None:
            assert self._bootstrap is not None
            return self._bootstrap
        connection = self._connections.get(node_id)
        if connection is None:
            if node_id not in self._brokers:
                self.metadata([])
            address = self._brokers.get(node_id)
            if address is None:
                raise ClientError(f"broker {node_id} is not in the cluster metadata")
            connection = BrokerConnection(address[0], address[1], self.client_id, self.timeout, self.security)
            self._connections[node_id] = connection
        return connection

    def send(
        self, api_key: int, request: Any, *, node_id: int | None = None, version: int | None = None
    ) -> Any:
        """Send `request` (a generated request object) and return the decoded answer."""
        connection = self.connection(node_id)
        if version is None:
            version = connection.version_for(api_key)
        return connection.send(api_key, version, request)

    def version_for(self, api_key: int, node_id: int | None = None) -> int:
        return self.connection(node_id).version_for(api_key)

    def metadata(self, topics: list[str] | None = None, *, auto_create: bool = False) -> Any:
        """Metadata for `topics` (None = every topic, [] = brokers only); remembers broker addresses."""
        cls = request_class(METADATA)
        wanted = None if topics is None else [cls.MetadataRequestTopic(name=name) for name in topics]
        response = self.send(METADATA, cls(topics=wanted, allow_auto_topic_creation=auto_create))
        self._brokers.update({b.node_id: (b.host, b.port) for b in response.brokers})
        return response

    def partition_leaders(self, topic: str, *, auto_create: bool = False) -> dict[int, int]:
        """partition -> leader node id of an existing topic; ClientError if it has none.

        With `auto_create`, the Metadata request asks the broker to create a missing topic (as Kafka's
        producers do, where `auto.create.topics.enable` allows it) and is repeated, for a few seconds,
        while the answer says the topic is still being created (LEADER_NOT_AVAILABLE, a partition
        without a leader, or briefly UNKNOWN_TOPIC_OR_PARTITION)."""
        deadline = time.monotonic() + (AUTO_CREATE_WAIT_SECONDS if auto_create else 0.0)
        unknown_until = time.monotonic() + (1.0 if auto_create else 0.0)
        while True:
            response = self.metadata([topic], auto_create=auto_create)
            entry = next((t for t in response.topics if t.name == topic), None)
            if entry is None:
                raise ClientError(f"topic {topic} is not in the metadata answer")
            leaders = {p.partition_index: p.leader_id for p in entry.partitions}
            pending = entry.error_code == LEADER_NOT_AVAILABLE or (
                entry.error_code == 0 and (not leaders or min(leaders.values()) < 0)
            )
            if entry.error_code == UNKNOWN_TOPIC_OR_PARTITION and time.monotonic() < unknown_until:
                pending = True
            if not pending or time.monotonic() >= deadline:
                if entry.error_code != 0:
                    raise ClientError(f"topic {topic}: {error_name(entry.error_code)}")
                return leaders
            time.sleep(0.1)


def error_name(code: int) -> str:
    from kafkacompat.wire.errors import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


# --- helpers shared by the command line tools ------------------------------------------------------


class CommandError(Exception):
    """A failure a command reports as one line on stderr (exit status 1)."""


def uuid_to_kafka_string(value: Any) -> str:
    """A topic id as Kafka prints it: URL-safe base64 of the 16 bytes, without padding."""
    import base64

    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def add_bootstrap_argument(parser: Any) -> None:
    parser.add_argument(
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"broker(s) to connect to, comma-separated (default {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, metavar="SECONDS", help="socket timeout (default 30)"
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties for a secured broker (security.protocol, sasl.*, ssl.*), as Kafka's tools",
    )


def command_security(args: Any) -> ClientSecurity | None:
    """The `--command-config` file of a command's arguments as ClientSecurity (None without one)."""
    path = getattr(args, "command_config", None)
    if not path:
        return None
    from kafkacompat.config import parse_properties
    from kafkacompat.security.client_auth import SecurityConfigError

    try:
        with open(path, encoding="utf-8") as handle:
            properties = parse_properties(handle.read())
        return ClientSecurity.from_properties(properties)
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None
    except SecurityConfigError as exc:
        raise CommandError(f"{path}: {exc}") from None


def parse_property_args(items: list[str] | None) -> dict[str, str]:
    """`--property k=v` (repeatable) -> {k: v}, with Java-style escapes in values (\\t, \\n)."""
    result: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise CommandError(f"property {item!r} is not key=value")
        result[key.strip()] = value.encode("utf-8").decode("unicode_escape")
    return result


def silence_stdout() -> None:
    """After a BrokenPipeError (e.g. `| head`): point stdout at /dev/null so the interpreter's final
    flush does not complain again."""
    import os
    import sys

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
