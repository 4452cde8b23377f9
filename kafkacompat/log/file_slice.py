"""A byte range of an open segment file, handed to the network layer instead of the bytes themselves.

Theory of operation: the read path never copies record data into Python. `PartitionLog.read()` returns
`FileSlice` objects; the wire encoder sees `.size`, writes the length prefix and passes the slice through;
the connection sends it with `os.sendfile(sock, fd, position, size)` on plain TCP, or calls
`read_bytes()` (one `os.pread`) where the bytes must pass through user space (TLS, tests).

The fd belongs to the segment (the log owns it). Segments removed by retention or truncation keep their
fd open until the delayed delete (`file.delete.delay.ms`) runs, so a slice taken just before a delete
stays readable for that long. A truncation can shrink the file under a slice: `read_bytes()` and
`sendfile` then return fewer bytes than `size`, and the sender must treat that as end of data.
"""

from __future__ import annotations

import os

__all__ = ["FileSlice"]


class FileSlice:
    """`size` bytes of file descriptor `fd` starting at byte `position`. Immutable value object."""

    __slots__ = ("fd", "position", "size")

    def __init__(self, fd: int, position: int, size: int) -> None:
        if position < 0 or size < 0:
            raise ValueError(f"negative position or size: {position}, {size}")
        self.fd = fd
        self.position = position
        self.size = size

    def read_bytes(self) -> bytes:
        """The slice's bytes (short if the file was truncated since the slice was taken)."""
        chunks: list[bytes] = []
        done = 0
        while done < self.size:
            chunk = os.pread(self.fd, self.size - done, self.position + done)
            if not chunk:
                break
            chunks.append(chunk)
            done += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def __len__(self) -> int:
        return self.size

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FileSlice):
            return NotImplemented
        return (self.fd, self.position, self.size) == (other.fd, other.position, other.size)

    def __hash__(self) -> int:
        return hash((self.fd, self.position, self.size))

    def __repr__(self) -> str:
        return f"FileSlice(fd={self.fd}, position={self.position}, size={self.size})"
