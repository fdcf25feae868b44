"""Hostile message sets and brokers, for testing that a client or broker stays bounded.

Each message set is valid up to the point where it costs memory or time: correct CRCs,
so decoders get as far as decompressing; :func:`peak_rss` measures what one cost a
process. :class:`SilentBroker` is a "broker" that accepts connections and never reads
them. Used by the test suite and ``benchmarks/bench_hostile.py``.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import zlib
from pathlib import Path
from typing import cast

from ..protocol import encode_message_set, gzip_compress
from ..protocol._accel import impl as _impl

__all__ = [
    "INNER_PARTIAL_WRAPPER",
    "SNAPPY_3_GIB",
    "LoopbackListener",
    "SilentBroker",
    "gzip_bomb",
    "peak_rss",
]

#: One snappy wrapper (22 bytes) whose raw block declares 3,572,681,096 uncompressed
#: bytes; unbounded, decoding it allocates that much before seeing the block is corrupt.
SNAPPY_3_GIB = bytes.fromhex("000000120102c11df6288893cba70d8c61af91886776")


#: A gzip wrapper entry (CRC correct) whose inner set starts with a partial entry (it
#: declares 100 bytes, 3 follow): corrupt data, which no fetch size can cure. A broker
#: refuses it on produce; tests write it over a plain entry of the same size on disk.
INNER_PARTIAL_WRAPPER = bytes(
    _impl.encode_message_set([gzip_compress(struct.pack(">i", 100) + b"abc")], 1, 1)
)


def gzip_bomb(messages: int, message_size: int = 1 << 20) -> bytes:
    """A message set of one gzip wrapper holding ``messages`` messages of
    ``message_size`` zero bytes, every CRC correct: about 1/1000 of its decompressed
    size (512 one-MiB messages take 538 KB). Built without holding the decompressed
    set in memory, and fast: each message is one deflate stretch after a full flush
    (which resets the compressor), so all of them are the same bytes, compressed once."""
    entry = encode_message_set([bytes(message_size)])
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    stretch = deflater.compress(entry) + deflater.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(messages):
        crc = zlib.crc32(entry, crc)
    parts = [
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff",
        stretch * messages,
        deflater.flush(),  # the final (empty) block
        struct.pack("<II", crc, (messages * len(entry)) & 0xFFFFFFFF),
    ]
    return bytes(_impl.encode_message_set([b"".join(parts)], 1, 1))


def peak_rss(pid: int) -> int:
    """A process's peak resident set size (VmHWM in ``/proc/<pid>/status``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")


class _Deaf(asyncio.Protocol):
    def __init__(self, server: SilentBroker) -> None:
        self.server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an asyncio.Transport subclass on every loop (uvloop's are not).
        transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        transport.pause_reading()  # never reads: the kernel's buffers fill, then the client's
        self.server.transports.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.closed_by_peer += 1


class LoopbackListener:
    """Where a test server listens: 127.0.0.1 and the free port its ``asyncio.Server``
    (set by the subclass once started) was given; ``broker_list`` is the static
    ``broker.list`` naming it as broker id 0."""

    _server: asyncio.Server | None = None

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        assert self._server is not None, "the server is not listening"
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def broker_list(self) -> str:
        return f"0:{self.host}:{self.port}"


class SilentBroker(LoopbackListener):
    """A "broker" on 127.0.0.1 that accepts connections and never reads from them, like
    a broker process that hangs: a client's writes fill the socket buffers, and nothing
    is ever answered. An async context manager; closing aborts every connection.
    ``broker_list`` is its static ``broker.list`` (broker id 0)."""

    def __init__(self) -> None:
        self._server = None
        self.transports: set[asyncio.Transport] = set()
        #: Connections that ended (closed by the client, or aborted at close).
        self.closed_by_peer = 0

    async def __aenter__(self) -> SilentBroker:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Deaf(self), self.host, 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        server, self._server = self._server, None
        for transport in list(self.transports):
            transport.abort()
        self.transports.clear()
        if server is not None:
            server.close()
            await server.wait_closed()
