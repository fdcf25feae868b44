"""Requests, responses and the frame splitter (PROTOCOL §1-§5)."""

from __future__ import annotations

import struct

import pytest

from aiokafka07.errors import (
    InvalidMessageSizeError,
    InvalidTopicError,
    KafkaError,
    MalformedFrameError,
    OffsetOutOfRangeError,
    UnknownError,
    error_for_code,
)
from aiokafka07.protocol import (
    EARLIEST,
    LATEST,
    FetchRequest,
    FetchResponse,
    FrameSplitter,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceRequest,
    RequestType,
    decode_fetch_response,
    decode_multifetch_response,
    decode_offsets_response,
    decode_request,
    encode_fetch_request,
    encode_fetch_response,
    encode_message_set,
    encode_multifetch_request,
    encode_multifetch_response,
    encode_multiproduce_request,
    encode_offsets_request,
    encode_offsets_response,
    encode_produce_request,
    encode_request,
    validate_topic,
)


def body(frame: bytes) -> bytes:
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    return frame[4:]


REQUESTS = [
    ProduceRequest("events", 0, encode_message_set([b"a", b"b"])),
    ProduceRequest("events", -1, b""),
    FetchRequest("events", 3, 123456789012, 1 << 20),
    OffsetsRequest("events", 1, LATEST, 1),
    OffsetsRequest("events", 1, EARLIEST, 10),
    OffsetsRequest("events", 0, 1_700_000_000_000, 5),
    MultiFetchRequest((FetchRequest("a", 0, 0, 10), FetchRequest("a", 0, 0, 10))),
    MultiFetchRequest(()),
    MultiProduceRequest(
        (ProduceRequest("a", 0, encode_message_set([b"x"])), ProduceRequest("b", 1, b""))
    ),
]


@pytest.mark.parametrize("request_value", REQUESTS, ids=lambda r: type(r).__name__)
def test_request_roundtrip(request_value: object) -> None:
    frame = encode_request(request_value)  # type: ignore[arg-type]
    assert decode_request(body(frame)) == request_value


def test_request_type_ids() -> None:
    assert [t.value for t in RequestType] == [0, 1, 2, 3, 4]
    assert body(encode_fetch_request("t", 0, 0, 1))[:2] == b"\x00\x01"
    assert body(encode_multifetch_request([]))[:2] == b"\x00\x02"
    assert body(encode_multiproduce_request([]))[:2] == b"\x00\x03"
    assert body(encode_offsets_request("t", 0, -1, 1))[:2] == b"\x00\x04"
    assert body(encode_produce_request("t", 0, b""))[:2] == b"\x00\x00"


@pytest.mark.parametrize(
    "topic",
    [
        "",
        ".",
        "..",
        "a/b",
        "tab\there",
        "del\x7f",
        "c1\x85",
        "pua\ue000",
        "hi\ufff0",
        "emoji\U0001f600",
        "x" * 256,
    ],
)
def test_invalid_topics_are_refused_before_sending(topic: str) -> None:
    with pytest.raises(InvalidTopicError) as info:
        encode_fetch_request(topic, 0, 0, 100)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, KafkaError)


@pytest.mark.parametrize("topic", ["events", "page-views.v2", "x" * 255, "...", "a.b", "café"])
def test_valid_topics(topic: str) -> None:
    assert validate_topic(topic) == topic
    frame = encode_fetch_request(topic, 0, 0, 100)
    assert decode_request(body(frame)) == FetchRequest(topic, 0, 0, 100)


def test_topic_length_is_the_utf8_byte_count() -> None:
    frame = encode_offsets_request("café", 0, -1, 1)
    assert body(frame)[2:4] == struct.pack(">h", 5)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: encode_fetch_request("t", 0, 0, -1), ValueError),
        (lambda: encode_fetch_request("t", 1 << 31, 0, 1), ValueError),
        (lambda: encode_fetch_request("t", 0, 1 << 63, 1), ValueError),
        (lambda: encode_fetch_request("t", 0, "0", 1), TypeError),
        (lambda: encode_offsets_request("t", 0, -1, -1), ValueError),
        (lambda: encode_multifetch_request([("t", 0, 0, 1)] * 32768), ValueError),
        (lambda: encode_fetch_request(b"t", 0, 0, 1), InvalidTopicError),
        (lambda: encode_request("nope"), TypeError),
    ],
)
def test_encoders_refuse_what_a_broker_would_choke_on(call: object, error: type) -> None:
    with pytest.raises(error):
        call()  # type: ignore[operator]


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00",
        b"\x00\x09" + b"\x00" * 20,  # unknown request type
        b"\x00\x01\xff\xff" + b"\x00" * 16,  # null topic
        b"\x00\x01\x00\x04wire\x00\x00",  # truncated fetch
        b"\x00\x00\x00\x04wire\x00\x00\x00\x00\x00\x00\x00\x64abc",  # set size > what follows
        b"\x00\x00\x00\x04wire\x00\x00\x00\x00\xff\xff\xff\xff",  # negative set size
        b"\x00\x02\xff\xff",  # negative multifetch count
        b"\x00\x03\x00\x02" + body(encode_produce_request("a", 0, b"")),  # count > entries
    ],
)
def test_malformed_requests(frame: bytes) -> None:
    with pytest.raises(MalformedFrameError):
        decode_request(frame)


def test_request_decoder_reads_invalid_utf8_topic_as_the_broker_does() -> None:
    frame = b"\x00\x01\x00\x02\xff\xfe" + struct.pack(">iqi", 0, 0, 10)
    request = decode_request(frame)
    assert isinstance(request, FetchRequest)
    assert request.topic == "\ufffd\ufffd"
    with pytest.raises(InvalidTopicError):
        validate_topic(request.topic)


def test_fetch_response_roundtrip_and_errors() -> None:
    data = encode_message_set([b"x"])
    frame = encode_fetch_response(0, data)
    response = decode_fetch_response(body(frame))
    assert response == FetchResponse(0, data)
    assert response.decode(40).messages[0].offset == 40 + len(data)

    out_of_range = decode_fetch_response(body(encode_fetch_response(1)))
    with pytest.raises(OffsetOutOfRangeError) as info:
        out_of_range.decode(52)
    assert info.value.offset == 52
    assert "52" in str(info.value)
    assert type(FetchResponse(-1, b"").error()) is UnknownError
    assert type(FetchResponse(77, b"").error()) is UnknownError
    assert FetchResponse(0, b"").error() is None


def test_error_codes_map_to_java_exception_classes() -> None:
    names = {code: error_for_code(code).__name__ for code in (-1, 1, 2, 3, 4, 9)}
    assert names == {
        -1: "UnknownError",
        1: "OffsetOutOfRangeError",
        2: "InvalidMessageError",
        3: "InvalidPartitionError",
        4: "InvalidMessageSizeError",
        9: "UnknownError",
    }
    assert error_for_code(4) is InvalidMessageSizeError
    with pytest.raises(ValueError, match="no error"):
        error_for_code(0)


def test_multifetch_response_roundtrip() -> None:
    responses = [
        FetchResponse(0, encode_message_set([b"a"])),
        FetchResponse(1, b""),
        FetchResponse(3, b""),
    ]
    frame = encode_multifetch_response(responses)
    multi = decode_multifetch_response(body(frame), count=3)
    assert list(multi.responses) == responses
    assert multi.error_code == 0
    with pytest.raises(MalformedFrameError, match="expected 2"):
        decode_multifetch_response(body(frame), count=2)


@pytest.mark.parametrize(
    "frame",
    [b"", b"\x00", b"\x00\x00\x00\x00\x00\x01\x00", b"\x00\x00\x00\x00\x00\x06\x00\x00"],
)
def test_malformed_multifetch_responses(frame: bytes) -> None:
    with pytest.raises(MalformedFrameError):
        decode_multifetch_response(frame)


def test_offsets_response_roundtrip() -> None:
    frame = encode_offsets_response([240, 216, 108, 0])
    assert decode_offsets_response(body(frame)).offsets == (240, 216, 108, 0)
    assert decode_offsets_response(body(encode_offsets_response([]))).offsets == ()
    for bad in (b"", b"\x00\x00\x00\x00\x00\x02" + b"\x00" * 8, b"\x00\x00\xff\xff\xff\xff"):
        with pytest.raises(MalformedFrameError):
            decode_offsets_response(bad)


def test_splitter_byte_by_byte_and_in_one_go() -> None:
    frames = [encode_fetch_response(0, b"x" * n) for n in (0, 1, 100, 5000)] + [
        encode_offsets_response([1, 2])
    ]
    stream = b"".join(frames)
    whole = FrameSplitter().feed(stream)
    assert whole == [f[4:] for f in frames]
    splitter = FrameSplitter()
    got = []
    for i in range(len(stream)):
        got += splitter.feed(stream[i : i + 1])
        assert splitter.buffered == len(stream[: i + 1]) - sum(4 + len(g) for g in got)
    assert got == whole
    assert splitter.buffered == 0
    assert splitter.pending_size is None


def test_splitter_reports_the_pending_frame_size() -> None:
    splitter = FrameSplitter()
    assert splitter.feed(encode_fetch_response(0, b"abcdef")[:7]) == []
    assert splitter.pending_size == 8


def test_splitter_reads_a_large_body_in_place_once_its_size_is_checked() -> None:
    """``reserve()`` offers nothing until a large frame's size is in and checked; then the
    rest of its body, which reads fill in place (what arrived before is copied in once);
    the frame comes out as that bytearray, and reading goes back to ``receive()``."""
    body = bytes(range(256)) * 400  # 102,400 bytes: over COLLECT_FROM
    stream = len(body).to_bytes(4, "big") + body + encode_offsets_response([7])
    splitter = FrameSplitter(max_size=1 << 20)
    assert splitter.reserve() is None
    splitter.receive(stream[:1000])
    assert splitter.reserve() is None  # the size is in, but not checked yet
    assert splitter.next_frame() is None  # checked: collecting
    view = splitter.reserve()
    assert view is not None
    assert len(view) == len(body) - 996
    view[:50_000] = stream[1000:51_000]
    splitter.received_into(50_000)
    assert splitter.next_frame() is None
    assert splitter.buffered == 51_000
    rest = splitter.reserve()
    assert rest is not None
    assert len(rest) == 4 + len(body) - 51_000
    rest[:] = stream[51_000 : 4 + len(body)]
    with pytest.raises(ValueError, match="received_into"):
        splitter.received_into(len(rest) + 1)  # more than was offered
    splitter.received_into(len(rest))
    frame = splitter.next_frame()
    assert type(frame) is bytearray
    assert frame == body
    assert splitter.reserve() is None
    splitter.receive(stream[4 + len(body) :])
    assert splitter.next_frame() == encode_offsets_response([7])[4:]
    assert splitter.buffered == 0


def test_splitter_reserves_nothing_for_a_size_over_its_bound() -> None:
    splitter = FrameSplitter(max_size=100_000)
    splitter.receive((100_001).to_bytes(4, "big") + b"\x00\x00")
    with pytest.raises(MalformedFrameError):
        splitter.next_frame()
    with pytest.raises(MalformedFrameError):
        splitter.reserve()  # poisoned: nothing is allocated for it
    with pytest.raises(MalformedFrameError):
        splitter.received_into(0)


def test_received_into_needs_a_reserve() -> None:
    splitter = FrameSplitter()
    with pytest.raises(ValueError, match="received_into"):
        splitter.received_into(1)


@pytest.mark.parametrize("size", [0, 1, -5, 200_000_000])
def test_splitter_refuses_bad_sizes_and_stays_failed(size: int) -> None:
    splitter = FrameSplitter(min_size=2, max_size=104857600)
    good = encode_offsets_response([7])
    with pytest.raises(MalformedFrameError) as info:
        splitter.feed(good + struct.pack(">i", size) + b"\x00\x00")
    assert info.value.position == len(good)
    assert info.value.decoded == [good[4:]]
    with pytest.raises(MalformedFrameError):
        splitter.feed(good)
