"""Golden vectors: every request and response captured from a real 0.7.2 broker and its
Java clients (tests/data/wire-samples.json) decodes to what the capture says and
re-encodes to exactly the captured bytes."""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

import pytest

from aiokafka07.errors import (
    InvalidMessageError,
    InvalidMessageSizeError,
    MalformedFrameError,
    UnknownMagicError,
)
from aiokafka07.protocol import (
    Compression,
    FetchRequest,
    FrameSplitter,
    MultiFetchRequest,
    OffsetsRequest,
    ProduceRequest,
    decode_fetch_response,
    decode_message_set,
    decode_multifetch_response,
    decode_offsets_response,
    decode_request,
    decompress,
    encode_fetch_request,
    encode_fetch_response,
    encode_message_set,
    encode_multifetch_response,
    encode_offsets_request,
    encode_offsets_response,
    encode_produce_request,
    encode_request,
    snappy_decompress,
)
from aiokafka07.protocol.requests import MAX_REQUEST_SIZE

from .samples import SAMPLES

# Requests the broker cannot parse (it closes the connection): the codec must refuse them.
MALFORMED_REQUESTS = {"j1", "j2", "j3", "j4", "j5", "i5"}
# Requests a broker parses but mishandles, which our encoder refuses to produce.
REFUSED_BY_ENCODER = {"d5"}  # negative fetch size: the broker writes a corrupt header
# Message sets written by Python's gzip (level 9) in the capture script, not by Java.
PYTHON_GZIP = {"k1", "k2"}


def request_frames(case: dict[str, Any]) -> list[bytes]:
    return FrameSplitter(min_size=1, max_size=MAX_REQUEST_SIZE).feed(
        bytes.fromhex(case["request_hex"])
    )


def payloads_of_set(message_set: bytes | memoryview) -> list[list[bytes]]:
    """Payloads of each top-level entry (one for plain messages, several for wrappers)."""
    out = []
    for entry in decode_message_set(message_set, shallow=True).messages:
        if entry.compression is Compression.NONE:
            out.append([entry.value])
        else:
            inner = decompress(entry.compression, entry.value)
            out.append([m.value for m in decode_message_set(inner).messages])
    return out


def rebuild_set(message_set: bytes | memoryview) -> bytes:
    """Encode each top-level entry again from its payloads and codec."""
    parts = []
    shallow = decode_message_set(message_set, shallow=True).messages
    for entry, payloads in zip(shallow, payloads_of_set(message_set), strict=True):
        parts.append(encode_message_set(payloads, compression=entry.compression, magic=entry.magic))
    return b"".join(parts)


@pytest.mark.parametrize("key", sorted(k for k, c in SAMPLES.items() if c["request_hex"]))
def test_request_roundtrip(key: str, impl: ModuleType) -> None:
    case = SAMPLES[key]
    raw = bytes.fromhex(case["request_hex"])
    if key in MALFORMED_REQUESTS:
        with pytest.raises(MalformedFrameError):
            [decode_request(frame) for frame in request_frames(case)]
        return
    frames = request_frames(case)
    if key in REFUSED_BY_ENCODER:
        (request,) = [decode_request(f) for f in frames]
        with pytest.raises(ValueError, match="max_size"):
            encode_request(request)
        return
    assert sum(4 + len(f) for f in frames) == len(raw)
    rebuilt = b"".join(encode_request(decode_request(f)) for f in frames)
    assert rebuilt == raw


def test_worked_bytes_from_the_spec() -> None:
    assert encode_fetch_request("test", 0, 0, 1 << 20) == bytes.fromhex(
        "00000018 0001 00047465737400000000 0000000000000000 00100000".replace(" ", "")
    )
    assert encode_offsets_request("test", 0, -1, 1) == bytes.fromhex(
        "00000018000400047465737400000000ffffffffffffffff00000001"
    )
    assert encode_produce_request("test", 0, encode_message_set([b"hello"])) == bytes.fromhex(
        "0000001f000000047465737400000000000000 0f0000000b01003610a68668656c6c6f".replace(" ", "")
    )


def test_produce_of_three_plain_messages_encodes_to_the_capture() -> None:
    message_set = encode_message_set([b"hello", b"world", b"kafka-0.7.2"])
    assert encode_produce_request("wire", 0, message_set) == bytes.fromhex(
        SAMPLES["a"]["request_hex"]
    )


def test_multiproduce_encodes_to_the_capture() -> None:
    from aiokafka07.protocol import encode_multiproduce_request

    raw = encode_multiproduce_request(
        [
            ("wire-multi", 0, encode_message_set([b"mp-p0"])),
            ("wire-multi", 1, encode_message_set([b"mp-p1"])),
        ]
    )
    assert raw == bytes.fromhex(SAMPLES["l1"]["request_hex"])


def test_magic0_produce_encodes_to_the_capture() -> None:
    raw = encode_produce_request("wire-magic0", 0, encode_message_set([b"m0-a", b"m0-b"], magic=0))
    assert raw == bytes.fromhex(SAMPLES["k3"]["request_hex"])


def test_multifetch_request_encodes_to_the_capture() -> None:
    request = MultiFetchRequest(
        (
            FetchRequest("wire-multi", 0, 0, 1024),
            FetchRequest("wire-multi", 1, 0, 1024),
            FetchRequest("wire", 0, 1000000, 1024),
        )
    )
    assert encode_request(request) == bytes.fromhex(SAMPLES["l2"]["request_hex"])


@pytest.mark.parametrize(
    ("key", "error", "position"),
    [("h1", InvalidMessageError, 0), ("h2", InvalidMessageError, 16), ("i6", UnknownMagicError, 0)],
)
def test_produced_sets_the_broker_rejects(key: str, error: type[Exception], position: int) -> None:
    (request,) = [decode_request(f) for f in request_frames(SAMPLES[key])]
    assert isinstance(request, ProduceRequest)
    with pytest.raises(error) as info:
        decode_message_set(request.message_set)
    assert info.value.position == position  # type: ignore[attr-defined]


def test_produced_set_with_partial_tail_keeps_the_complete_message() -> None:
    (request,) = [decode_request(f) for f in request_frames(SAMPLES["i1"])]
    assert isinstance(request, ProduceRequest)
    decoded = decode_message_set(request.message_set)
    # The broker appended 18 bytes: exactly the one complete message.
    assert decoded.valid_bytes == 18
    assert [m.value for m in decoded.messages] == [b"complete"]


_ENTRY = re.compile(r"@(\d+) len=(\d+) magic=(\d) attr=(\w+)")
_OFFSETS = re.compile(r"offsets=\[([\d, ]*)\]")


def _request_of(case: dict[str, Any]) -> Any:
    return decode_request(request_frames(case)[-1])


def _response_cases() -> list[str]:
    return sorted(k for k, c in SAMPLES.items() if c["response_hex"])


@pytest.mark.parametrize("key", _response_cases())
def test_response_decodes_as_captured(key: str, impl: ModuleType) -> None:
    case = SAMPLES[key]
    raw = bytes.fromhex(case["response_hex"])
    splitter = FrameSplitter()
    if key == "d5":
        # Negative fetch size: the broker writes a corrupt header (size 1) and closes.
        with pytest.raises(MalformedFrameError):
            splitter.feed(raw)
        return
    (frame,) = splitter.feed(raw)
    assert splitter.buffered == 0
    request = _request_of(case)
    decoded_text = case["decoded"] or ""
    if isinstance(request, OffsetsRequest):
        response = decode_offsets_response(frame)
        expected = [int(x) for x in _OFFSETS.search(decoded_text).group(1).split(",") if x.strip()]  # type: ignore[union-attr]
        assert list(response.offsets) == expected
        assert encode_offsets_response(response.offsets) == raw
    elif isinstance(request, MultiFetchRequest):
        multi = decode_multifetch_response(frame, count=len(request.fetches))
        codes = [int(c) for c in re.findall(r"error=(-?\d+) data", decoded_text)]
        assert [r.error_code for r in multi.responses] == codes
        assert encode_multifetch_response(multi.responses) == raw
        for sub in multi.responses:
            assert rebuild_set(sub.message_set) == bytes(sub.message_set)
    else:
        assert isinstance(request, FetchRequest)
        response = decode_fetch_response(frame)
        assert encode_fetch_response(response.error_code, response.message_set) == raw
        assert response.error_code == int(re.search(r"error=(-?\d+)", decoded_text).group(1))  # type: ignore[union-attr]
        _check_fetched_set(key, request, response.message_set, decoded_text)


def _check_fetched_set(key: str, request: FetchRequest, data: Any, text: str) -> None:
    entries = [tuple(int(x) if x.isdigit() else None for x in m) for m in _ENTRY.findall(text)]
    if "incomplete/garbage" in text and not entries:
        # A fetch from the middle of a message, or a fetch size below the first message.
        with pytest.raises(InvalidMessageSizeError):
            decode_message_set(data, request.offset)
        return
    shallow = decode_message_set(data, request.offset, shallow=True)
    assert [(m.offset, m.magic) for m in shallow.messages] == [
        (request.offset + pos + 4 + size, magic) for pos, size, magic, _ in entries
    ]
    assert [m.attributes if m.magic == 1 else None for m in shallow.messages] == [
        attr for _, _, _, attr in entries
    ]
    assert shallow.valid_bytes == sum(4 + size for _, size, _, _ in entries)
    deep = decode_message_set(data, request.offset)
    assert deep.valid_bytes == shallow.valid_bytes
    if key in PYTHON_GZIP:
        return
    if key == "m2":
        # Java's snappy-java 1.0.4.1 block compressor and cramjam's find different
        # matches; the framing is identical and the content must be.
        for wrapper, payloads in zip(shallow.messages, payloads_of_set(data), strict=True):
            ours = decode_message_set(
                encode_message_set(payloads, compression="snappy"), shallow=True
            )
            assert ours.messages[0].value[:16] == wrapper.value[:16]
            assert snappy_decompress(ours.messages[0].value) == snappy_decompress(wrapper.value)
        return
    # Plain sets and the Java producer's gzip sets are rebuilt byte for byte.
    assert rebuild_set(data) == bytes(data)[: shallow.valid_bytes]


def test_java_gzip_wrappers_report_0_7_2_offsets() -> None:
    case = SAMPLES["m1"]
    (frame,) = FrameSplitter().feed(bytes.fromhex(case["response_hex"]))
    data = decode_fetch_response(frame).message_set
    starts_ends = [(0, 1466), (1466, 2950), (2950, 3838)]
    deep = decode_message_set(data).messages
    sizes = [len(p) for p in payloads_of_set(data)]
    assert sizes == [200, 200, 115]
    i = 0
    for (start, end), n in zip(starts_ends, sizes, strict=True):
        offsets = [m.offset for m in deep[i : i + n]]
        assert offsets == [start] * (n - 1) + [end]
        i += n
    assert deep[0].value == b"msg-0000"
    assert deep[-1].offset == 3838


def test_fetched_set_after_a_produce_burst() -> None:
    # f5e: a fetch of the one message produced in f5a, after the broker's flush.
    case = SAMPLES["f5e"]
    request = _request_of(case)
    (frame,) = FrameSplitter().feed(bytes.fromhex(case["response_hex"]))
    decoded = decode_fetch_response(frame).decode(request.offset)
    assert [(m.offset, m.value) for m in decoded.messages] == [(114, b"unflushed")]
