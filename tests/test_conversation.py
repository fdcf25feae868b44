"""The sans-IO conversation, without sockets: FIFO pairing of answers, produce frames
without answers, the confirm probe, cancellation, answer size bounds, and properties over
arbitrary interleavings of requests, answer bytes split anywhere, and garbage."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokafka07.errors import InvalidPartitionError, KafkaError, MalformedFrameError, ProtocolError
from aiokafka07.protocol import (
    LATEST,
    FetchRequest,
    decode_request,
    encode_fetch_request,
    encode_fetch_response,
    encode_multifetch_request,
    encode_multifetch_response,
    encode_multiproduce_request,
    encode_offsets_request,
    encode_offsets_response,
    encode_produce_request,
)
from aiokafka07.protocol.conversation import Conversation, answer_limit, confirm_target

MSET = b"\0" * 10  # message-set bytes (not decoded by the conversation)


def written(conversation: Conversation[Any]) -> bytes:
    return b"".join(conversation.data_to_send().frames)


# -- the rules, one by one -------------------------------------------------------------


def test_answer_limits_follow_the_requests() -> None:
    assert answer_limit(encode_fetch_request("t", 0, 0, 1000)) == 2 + 1000
    assert answer_limit(encode_offsets_request("t", 0, LATEST, 3)) == 6 + 8 * 3
    multi = encode_multifetch_request([FetchRequest("a", 0, 0, 10), FetchRequest("bb", 1, 5, 7)])
    assert answer_limit(multi) == 2 + (6 + 10) + (6 + 7)
    assert answer_limit(encode_multifetch_request([])) == 2
    assert answer_limit(encode_produce_request("t", 0, MSET)) is None
    assert answer_limit(encode_multiproduce_request([("t", 0, MSET), ("u", 1, MSET)])) is None


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\0\0\0\x02\0",  # shorter than a header
        struct.pack(">ih", 10, 1),  # size field larger than the frame
        struct.pack(">ih", 2, 9),  # unknown type
        encode_fetch_request("t", 0, 0, 10)[:-1],  # truncated
        encode_fetch_request("t", 0, 0, 10)[:-4] + struct.pack(">i", -1),  # negative max
        struct.pack(">ihh", 4, 2, -1),  # multifetch with a negative count
    ],
)
def test_frames_that_are_not_requests_are_refused_before_anything_is_queued(frame: bytes) -> None:
    conversation: Conversation[int] = Conversation()
    with pytest.raises(MalformedFrameError):
        conversation.send_request(frame, 1)
    assert conversation.outbox_bytes == 0
    assert written(conversation) == b""


def test_requests_and_produces_are_told_apart_by_type() -> None:
    conversation: Conversation[int] = Conversation()
    with pytest.raises(MalformedFrameError, match="send_produce"):
        conversation.send_request(encode_produce_request("t", 0, MSET), 1)
    with pytest.raises(MalformedFrameError, match="PRODUCE"):
        conversation.send_produce(encode_offsets_request("t", 0, LATEST, 1))
    assert conversation.outbox_bytes == 0


def test_confirm_probe_asks_about_the_last_entry() -> None:
    single = encode_produce_request("one", 3, MSET)
    assert confirm_target(single) == ("one", 3)
    multi = encode_multiproduce_request([("a", 1, MSET), ("b", -1, MSET)])
    assert confirm_target(multi) == ("b", -1)
    conversation: Conversation[str] = Conversation()
    conversation.send_produce(multi, "confirm", confirm=True)
    out = conversation.data_to_send()
    assert out.frames[0] == multi
    # OFFSETS refuses partition -1, so the probe asks about partition 0.
    assert decode_request(out.frames[1][4:]) == decode_request(
        encode_offsets_request("b", 0, LATEST, 1)[4:]
    )
    assert conversation.receive_data(encode_offsets_response([77])) == [
        ("confirm", encode_offsets_response([77])[4:])
    ]
    with pytest.raises(InvalidPartitionError):
        conversation.send_produce(encode_produce_request("t", -2, MSET), "x", confirm=True)
    with pytest.raises(MalformedFrameError, match="nothing to confirm"):
        conversation.send_produce(encode_multiproduce_request([]), "x", confirm=True)
    assert conversation.outbox_bytes == 0


def test_produce_tokens_are_reported_when_written() -> None:
    conversation: Conversation[str] = Conversation()
    conversation.send_produce(encode_produce_request("t", 0, MSET), "p1")
    conversation.send_produce(encode_produce_request("t", 0, MSET))
    assert conversation.outstanding == 0  # produces await no answer
    assert conversation.tokens() == ["p1"]
    out = conversation.data_to_send()
    assert len(out.frames) == 2
    assert out.written == ["p1"]
    assert conversation.written == 2
    assert conversation.tokens() == []


def test_cancelled_before_writing_is_never_written_after_is_answered_and_dropped() -> None:
    conversation: Conversation[str] = Conversation()
    a = conversation.send_request(encode_offsets_request("t", 0, LATEST, 1), "a")
    conversation.send_request(encode_offsets_request("t", 1, LATEST, 1), "b")
    assert conversation.cancel(a)  # never written
    conversation.send_request(encode_offsets_request("t", 2, LATEST, 1), "c")
    out = conversation.data_to_send(wanted=lambda token: token != "c")  # c gave up too
    assert [decode_request(f[4:]).partition for f in out.frames] == [1]  # type: ignore[union-attr]
    d = conversation.send_request(encode_offsets_request("t", 3, LATEST, 1), "d")
    conversation.send_request(encode_offsets_request("t", 4, LATEST, 1), "e")
    written(conversation)
    assert not conversation.cancel(d)  # written: keeps its place
    answers = b"".join(encode_offsets_response([n]) for n in (1, 3, 4))
    assert [token for token, _ in conversation.receive_data(answers)] == ["b", "e"]
    assert conversation.awaiting == 0


def test_a_size_over_the_requests_bound_fails_before_the_body_arrives() -> None:
    conversation: Conversation[str] = Conversation()
    conversation.send_request(encode_fetch_request("t", 0, 0, 100), "small")
    conversation.send_request(encode_fetch_request("t", 0, 0, 10_000), "large")
    written(conversation)
    first = encode_fetch_response(0, b"x" * 100)
    # The second answer says 1 GB, where 10,002 bytes is the most its request allows:
    # refused from its size field alone, with the first answer delivered on the error.
    with pytest.raises(MalformedFrameError, match=r"outside 2\.\.10002") as info:
        conversation.receive_data(first + struct.pack(">i", 1 << 30))
    assert info.value.decoded == [("small", first[4:])]
    assert conversation.error is info.value
    with pytest.raises(MalformedFrameError):
        conversation.receive_data(b"more")
    with pytest.raises(MalformedFrameError):
        conversation.send_request(encode_fetch_request("t", 0, 0, 1), "late")


def test_bytes_nobody_asked_for_break_the_conversation() -> None:
    conversation: Conversation[str] = Conversation()
    with pytest.raises(ProtocolError, match="nobody asked for"):
        conversation.receive_data(b"\0")
    conversation = Conversation()
    conversation.send_request(encode_offsets_request("t", 0, LATEST, 1), "a")
    # Not written yet, so not answerable: an answer now is unsolicited.
    with pytest.raises(ProtocolError, match="nobody asked for"):
        conversation.receive_data(encode_offsets_response([1]))


def test_close_tells_written_from_unwritten() -> None:
    conversation: Conversation[str] = Conversation()
    conversation.send_request(encode_offsets_request("t", 0, LATEST, 1), "sent")
    conversation.send_produce(encode_produce_request("t", 0, MSET), "produce sent")
    written(conversation)
    conversation.send_request(encode_offsets_request("t", 0, LATEST, 1), "queued")
    conversation.send_produce(encode_produce_request("t", 0, MSET), "produce queued")
    assert conversation.outstanding == 2
    assert conversation.close() == (["sent"], ["queued", "produce queued"])
    assert conversation.closed
    with pytest.raises(ProtocolError, match="closed"):
        conversation.send_produce(encode_produce_request("t", 0, MSET))


def test_answers_split_at_every_byte_come_out_whole_and_in_order() -> None:
    frames = [
        encode_fetch_response(0, b"payload" * 20),
        encode_offsets_response([1, 2]),
        encode_multifetch_response([(0, b"a"), (3, b"")]),
        encode_fetch_response(1, b""),
    ]
    stream = b"".join(frames)
    requests = [
        encode_fetch_request("t", 0, 0, 140),
        encode_offsets_request("t", 0, LATEST, 2),
        encode_multifetch_request([FetchRequest("t", 0, 0, 1), FetchRequest("t", 1, 0, 1)]),
        encode_fetch_request("t", 0, 99, 0),
    ]
    expected = [(i, f[4:]) for i, f in enumerate(frames)]
    for cut in range(len(stream) + 1):
        conversation: Conversation[int] = Conversation()
        for i, request in enumerate(requests):
            conversation.send_request(request, i)
        written(conversation)
        got = conversation.receive_data(stream[:cut]) + conversation.receive_data(stream[cut:])
        assert got == expected, cut
    conversation = Conversation()
    for i, request in enumerate(requests):
        conversation.send_request(request, i)
    written(conversation)
    got = []
    for k in range(len(stream)):
        got += conversation.receive_data(stream[k : k + 1])
    assert got == expected


# -- properties -------------------------------------------------------------------------


class Broker:
    """Answers written frames as a 0.7 broker would, within each request's bounds."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def answer(self, frame: bytes) -> bytes | None:
        request = decode_request(frame[4:])
        kind = type(request).__name__
        if kind in ("ProduceRequest", "MultiProduceRequest"):
            return None
        if kind == "FetchRequest":
            size = self.rng.randint(0, request.max_size)  # type: ignore[union-attr]
            return encode_fetch_response(0, self.rng.randbytes(size))
        if kind == "OffsetsRequest":
            count = self.rng.randint(0, request.max_offsets)  # type: ignore[union-attr]
            return encode_offsets_response(range(count))
        fetches = request.fetches  # type: ignore[union-attr]
        return encode_multifetch_response(
            [(0, self.rng.randbytes(self.rng.randint(0, f.max_size))) for f in fetches]
        )


def request_frame(kind: int, size: int) -> bytes:
    if kind == 0:
        return encode_fetch_request("t", 0, 0, size)
    if kind == 1:
        return encode_offsets_request("t", 0, LATEST, size % 4)
    return encode_multifetch_request([FetchRequest("t", p, 0, size) for p in range(size % 3)])


operation = st.one_of(
    st.tuples(st.just("request"), st.integers(0, 2), st.integers(0, 200)),
    st.tuples(st.just("produce"), st.booleans(), st.integers(0, 0)),
    st.tuples(st.just("flush"), st.integers(0, 0), st.integers(0, 0)),
    st.tuples(st.just("cancel"), st.integers(0, 10_000), st.integers(0, 0)),
    st.tuples(st.just("deliver"), st.integers(0, 400), st.integers(0, 0)),
)


@given(ops=st.lists(operation, max_size=40), seed=st.integers(0, 2**32))
def test_any_interleaving_gives_every_wanted_answer_in_order(
    ops: list[tuple[str, int, int]], seed: int
) -> None:
    rng = random.Random(seed)
    broker = Broker(rng)
    conversation: Conversation[int] = Conversation()
    exchanges: list[Any] = []
    bodies: dict[int, bytes] = {}
    expected_order: list[int] = []  # tokens of written requests, in write order
    cancelled: set[int] = set()
    stream = bytearray()
    got: list[tuple[int, bytes]] = []
    for op, a, b in ops:
        token = len(exchanges)
        if op == "request":
            exchanges.append(conversation.send_request(request_frame(a, b), token))
        elif op == "produce":
            frame = encode_produce_request("t", 0, MSET)
            exchanges.append(conversation.send_produce(frame, token, confirm=bool(a)))
        elif op == "cancel" and exchanges:
            index = a % len(exchanges)
            answered = {t for t, _ in got}
            if exchanges[index] is not None and index not in answered:
                # Queued: never written. Written: its answer must be dropped.
                conversation.cancel(exchanges[index])
                cancelled.add(index)
        elif op == "flush":
            for frame in conversation.data_to_send().frames:
                answer = broker.answer(frame)
                if answer is not None:
                    token_of = next(
                        t
                        for t, e in enumerate(exchanges)
                        if e is not None and e.frame is frame and t not in expected_order
                    )
                    expected_order.append(token_of)
                    bodies[token_of] = answer[4:]
                    stream += answer
        elif op == "deliver":
            chunk, stream[:] = bytes(stream[:a]), stream[a:]
            got += conversation.receive_data(chunk)
    got += conversation.receive_data(bytes(stream))
    wanted = [t for t in expected_order if t not in cancelled]
    assert [t for t, _ in got] == wanted
    assert all(body == bodies[t] for t, body in got)
    assert conversation.awaiting == 0


@given(
    requests=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 64)), min_size=1, max_size=8),
    garbage=st.binary(min_size=1, max_size=40),
    at=st.integers(0, 10_000),
    chunks=st.lists(st.integers(1, 50), min_size=1, max_size=20),
    seed=st.integers(0, 2**32),
)
def test_garbage_anywhere_gives_answers_in_order_or_a_typed_error(
    requests: list[tuple[int, int]], garbage: bytes, at: int, chunks: list[int], seed: int
) -> None:
    rng = random.Random(seed)
    broker = Broker(rng)
    conversation: Conversation[int] = Conversation()
    for token, (kind, size) in enumerate(requests):
        conversation.send_request(request_frame(kind, size), token)
    answers = [broker.answer(f) for f in conversation.data_to_send().frames]
    stream = b"".join(a for a in answers if a is not None)
    at %= len(stream) + 1
    corrupted = stream[:at] + garbage + stream[at:]
    clean = sum(1 for end in _frame_ends(stream) if end <= at)  # answers before the garbage
    got: list[tuple[int, bytes]] = []
    error: KafkaError | None = None
    position = 0
    for size in [*chunks, len(corrupted)]:
        chunk, position = corrupted[position : position + size], position + size
        try:
            got += conversation.receive_data(chunk)
        except KafkaError as exc:
            error = exc
            got += exc.decoded or []  # type: ignore[attr-defined]
            break
    tokens = [t for t, _ in got]
    assert tokens == list(range(len(tokens)))  # in order, never one twice or skipped
    assert len(tokens) <= len(requests)
    for token, body in got[:clean]:
        assert body == answers[token][4:]  # type: ignore[index]
    if error is not None:
        assert isinstance(error, ProtocolError)
        with pytest.raises(ProtocolError):
            conversation.receive_data(b"x")
    elif len(tokens) < len(requests):
        assert conversation.awaiting == len(requests) - len(tokens)  # waiting for more


def _frame_ends(stream: bytes) -> list[int]:
    ends, pos = [], 0
    while pos + 4 <= len(stream):
        pos += 4 + struct.unpack_from(">i", stream, pos)[0]
        ends.append(pos)
    return ends
