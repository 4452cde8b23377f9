"""This broker's client to the other brokers: one async connection to one broker's inter-broker listener.

Theory of operation
-------------------
Fetchers, the controller's channel, the requests to the controller and the coordinators' markers and
verifications talk to other brokers on the trio loop: no worker thread is held while an answer is
awaited, and cancelling the waiting task cancels the request.

`connect(host, port, client_id=, timeout=, security=)` opens an `InterBrokerConnection`:

- TCP (`trio.open_tcp_stream`, TCP_NODELAY); for SSL/SASL_SSL a `trio.SSLStream` with the listener's
  client context (`ClientSecurity.context`, resolved by `security.inter_broker.inter_broker_client`) and
  the peer's host as server name, the handshake done at once, within `timeout`;
- ApiVersions v3 (v0 again if a peer answers UNSUPPORTED_VERSION): `version_for(api_key)` is the highest
  version both the peer and this broker's codecs serve;
- SASL: SaslHandshake v1, then SaslAuthenticate v1 rounds driven by `ClientSecurity.exchange`, the
  PLAIN/SCRAM client the command line tools share. It is written against a blocking send, so it runs in a
  worker thread (SCRAM's PBKDF2 stays off the loop) and each token goes back to the loop through
  `trio.from_thread.run`.

`send(api_key, version, request)` frames the request with `wire.header` and `wire.messages`, reads
frames (`wire.framing.FrameBuffer`) until the answer is complete, checks its correlation id and decodes
it. Sends are serialised by a lock; `timeout` bounds each one (`InterBrokerTimeout`). Any failed request
(timeout, reset, closed peer, unreadable answer, cancellation) closes the connection, because the stream
may hold half a request or a late answer: later sends raise `InterBrokerError` and the caller connects
again. Kafka error codes in an answer are the caller's to read. `close()` and `aclose()` close the socket
at once (no TLS close_notify) and are idempotent.

Imports wire/ and security/ only, nothing of the serving package (the import rule).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

import trio

from kafkacompat.wire.api_keys import ApiKey
from kafkacompat.wire.errors import ErrorCode
from kafkacompat.wire.framing import FrameBuffer
from kafkacompat.wire.header import RequestHeader, decode_response_header, encode_request_header
from kafkacompat.wire.messages import API_SPECS, decode_response, encode_request, request_class

if TYPE_CHECKING:
    from kafkacompat.security.client_auth import ClientSecurity

__all__ = ["InterBrokerConnection", "InterBrokerError", "InterBrokerTimeout", "connect"]

#: the largest answer frame read (a Fetch answer is bounded by replica.fetch.response.max.bytes)
MAX_RESPONSE_BYTES = 512 * 1024 * 1024
#: bytes asked of the stream per read, at least (more while a large answer is arriving, up to _MAX_READ)
_MIN_READ = 1 << 16
_MAX_READ = 1 << 20
_SIZE = struct.Struct(">i")

SOFTWARE_NAME = "kafkacompat-broker"
SOFTWARE_VERSION = "1.0"


class InterBrokerError(Exception):
    """Another broker could not be reached, or its answer could not be read; the connection is closed."""


class InterBrokerTimeout(InterBrokerError):
    """No answer (or no connection) within the timeout."""


async def connect(
    host: str, port: int, *, client_id: str, timeout: float, security: ClientSecurity | None = None
) -> InterBrokerConnection:
    """An open, negotiated and (with SASL) authenticated connection to host:port (see module docstring).

    Raises InterBrokerTimeout when connecting, the TLS handshake or one of the first requests takes longer
    than `timeout` seconds, InterBrokerError for any other failure."""
    where = f"{host}:{port}"
    try:
        with trio.fail_after(timeout):
            socket_stream = await trio.open_tcp_stream(host, port)
    except trio.TooSlowError:
        raise InterBrokerTimeout(f"cannot connect to {where} within {timeout:g}s") from None
    except OSError as exc:
        raise InterBrokerError(f"cannot connect to {where}: {exc}") from exc
    connection = InterBrokerConnection(socket_stream, host, port, client_id, timeout)
    try:
        if security is not None and security.tls:
            await connection._start_tls(security)
        await connection._negotiate()
        if security is not None and security.sasl:
            await connection._authenticate(security)
    except BaseException:
        connection.close()
        raise
    return connection


class InterBrokerConnection:
    """One connection to one broker, with the API versions that broker serves (see module docstring)."""

    def __init__(
        self, socket_stream: trio.SocketStream, host: str, port: int, client_id: str, timeout: float
    ) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        #: seconds each request may take, first byte sent to answer read
        self.timeout = timeout
        #: api key -> (lowest, highest) version the peer serves (from its ApiVersions answer)
        self.versions: dict[int, tuple[int, int]] = {}
        self._socket_stream = socket_stream
        self._stream: trio.abc.Stream = socket_stream
        self._frames = FrameBuffer(MAX_RESPONSE_BYTES)
        self._correlation = 0
        self._lock = trio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<InterBrokerConnection {self.client_id} to {self.host}:{self.port} {state}>"

    @property
    def closed(self) -> bool:
        return self._closed

    # --- opening ---------------------------------------------------------------------------------------

    async def _start_tls(self, security: ClientSecurity) -> None:
        if security.context is None:
            raise InterBrokerError(
                f"TLS to {self.host}:{self.port} needs the inter-broker listener's client context"
            )
        tls = trio.SSLStream(self._socket_stream, security.context, server_hostname=self.host)
        try:
            with trio.fail_after(self.timeout):
                await tls.do_handshake()
        except trio.TooSlowError:
            raise InterBrokerTimeout(f"TLS handshake with {self.host}:{self.port}: no answer") from None
        except (trio.BrokenResourceError, OSError, ValueError) as exc:
            cause = exc.__cause__ or exc  # trio's BrokenResourceError wraps the ssl.SSLError
            raise InterBrokerError(f"TLS handshake with {self.host}:{self.port} failed: {cause}") from exc
        self._stream = tls

    async def _negotiate(self) -> None:
        cls = request_class(ApiKey.API_VERSIONS)
        hello = cls(client_software_name=SOFTWARE_NAME, client_software_version=SOFTWARE_VERSION)
        response = await self.send(ApiKey.API_VERSIONS, 3, hello)
        if response.error_code != ErrorCode.NONE:
            # UNSUPPORTED_VERSION, in the v0 layout every broker can read and answer: ask again in v0
            response = await self.send(ApiKey.API_VERSIONS, 0, cls())
        if response.error_code != ErrorCode.NONE:
            raise InterBrokerError(
                f"ApiVersions to {self.host}:{self.port} failed: {_error_name(response.error_code)}"
            )
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    async def _authenticate(self, security: ClientSecurity) -> None:
        """SaslHandshake v1 then SaslAuthenticate, as the Java client does (KIP-152)."""
        where = f"{self.host}:{self.port}"
        handshake = await self.send(
            ApiKey.SASL_HANDSHAKE, 1, request_class(ApiKey.SASL_HANDSHAKE)(mechanism=security.mechanism)
        )
        if handshake.error_code != ErrorCode.NONE:
            raise InterBrokerError(
                f"SASL mechanism {security.mechanism} refused by {where} "
                f"(enabled: {', '.join(handshake.mechanisms)})"
            )

        async def round_trip(token: bytes) -> bytes:
            request = request_class(ApiKey.SASL_AUTHENTICATE)(auth_bytes=token)
            answer = await self.send(ApiKey.SASL_AUTHENTICATE, 1, request)
            if answer.error_code != ErrorCode.NONE:
                raise InterBrokerError(f"SASL authentication to {where} failed: {answer.error_message}")
            return bytes(answer.auth_bytes)

        def authenticate(token: bytes) -> bytes:  # in the worker thread: the send itself runs on the loop
            return trio.from_thread.run(round_trip, token)

        try:
            await trio.to_thread.run_sync(security.exchange, authenticate)
        except ValueError as exc:  # the peer's SCRAM answer does not verify
            raise InterBrokerError(f"SASL authentication to {where} failed: {exc}") from exc

    # --- requests --------------------------------------------------------------------------------------

    def version_for(self, api_key: int, cap: int | None = None) -> int:
        """Highest version of `api_key` that both the peer and this broker's codecs serve (at most `cap`).
        InterBrokerError when there is none."""
        spec = API_SPECS[api_key]
        served = self.versions.get(api_key)
        if served is None:
            raise InterBrokerError(f"the broker at {self.host}:{self.port} does not serve {spec.name}")
        high = min(served[1], spec.max_version)
        if cap is not None:
            high = min(high, cap)
        if high < max(served[0], spec.min_version):
            raise InterBrokerError(
                f"no {spec.name} version in common with the broker at {self.host}:{self.port}"
            )
        return high

    async def send(self, api_key: int, version: int, request: Any) -> Any:
        """Send `request` (a generated request object) in `version` and return the decoded answer.

        InterBrokerTimeout after `timeout` seconds without the whole answer, InterBrokerError when the
        connection fails, is closed or the answer cannot be read; the connection is closed after either."""
        async with self._lock:
            if self._closed:
                raise InterBrokerError(f"the connection to {self.host}:{self.port} is closed")
            self._correlation += 1
            correlation_id = self._correlation
            header = encode_request_header(RequestHeader(api_key, version, correlation_id, self.client_id))
            body = encode_request(api_key, version, request)
            name = API_SPECS[api_key].name
            answered = False
            try:
                with trio.fail_after(self.timeout):
                    await self._stream.send_all(_SIZE.pack(len(header) + len(body)) + header + body)
                    frame = await self._read_frame()
                response = self._decode(api_key, version, correlation_id, frame)
                answered = True
            except trio.TooSlowError:
                raise InterBrokerTimeout(
                    f"{name} to {self.host}:{self.port}: no answer within {self.timeout:g}s"
                ) from None
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise InterBrokerError(f"{name} to {self.host}:{self.port}: {exc!r}") from exc
            finally:
                if not answered:  # half a request or a late answer may be on the stream: never reuse it
                    self.close()
            return response

    async def _read_frame(self) -> memoryview:
        while True:
            try:
                frame = self._frames.next_frame()
            except ValueError as exc:  # a size prefix out of range
                raise InterBrokerError(f"{self.host}:{self.port}: {exc}") from exc
            if frame is not None:
                return frame
            want = min(max(self._frames.missing, _MIN_READ), _MAX_READ)
            data = await self._stream.receive_some(want)
            if not data:
                raise InterBrokerError(f"{self.host}:{self.port} closed the connection")
            self._frames.receive_data(data)

    def _decode(self, api_key: int, version: int, correlation_id: int, frame: memoryview) -> Any:
        name = API_SPECS[api_key].name
        try:
            response_header, offset = decode_response_header(api_key, version, frame)
        except ValueError as exc:
            raise InterBrokerError(f"{name} answer from {self.host}:{self.port}: {exc}") from exc
        if response_header.correlation_id != correlation_id:
            raise InterBrokerError(
                f"{name} answer from {self.host}:{self.port} for correlation id "
                f"{response_header.correlation_id}, expected {correlation_id}"
            )
        try:
            return decode_response(api_key, version, frame[offset:])
        except ValueError as exc:
            raise InterBrokerError(
                f"cannot decode the {name} answer from {self.host}:{self.port}: {exc}"
            ) from exc

    # --- closing ---------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the socket now; a request waiting on it fails with InterBrokerError."""
        if not self._closed:
            self._closed = True
            self._socket_stream.socket.close()

    async def aclose(self) -> None:
        """As `close`, at a checkpoint."""
        self.close()
        await trio.lowlevel.checkpoint()


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
