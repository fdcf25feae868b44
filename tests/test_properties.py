"""Property tests: round trips, every truncation point, garbage gives typed errors only,
and the C accelerator agrees with the pure-Python codec on any input."""

from __future__ import annotations

import contextlib
import platform
import random
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aiokafka07.errors import (
    CompressionError,
    InvalidMessageSizeError,
    MalformedFrameError,
    ProtocolError,
)
from aiokafka07.protocol import (
    Compression,
    FetchRequest,
    FetchResponse,
    FrameSplitter,
    Message,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceRequest,
    _accel,
    _pure,
    decode_fetch_response,
    decode_message_set,
    decode_multifetch_response,
    decode_offsets_response,
    decode_request,
    encode_fetch_response,
    encode_message_set,
    encode_multifetch_response,
    encode_offsets_response,
    encode_request,
    gzip_compress,
    gzip_decompress,
    snappy_compress,
    snappy_decompress,
)
from aiokafka07.protocol.messages import count_messages, summarize_message_set
from aiokafka07.protocol.requests import encode_produce_frame, encode_produce_request

from .conftest import IMPLEMENTATIONS

payload = st.binary(max_size=200)
payload_lists = st.lists(payload, max_size=20)
codecs = st.sampled_from(list(Compression))
# A message set as a list of top-level entries: (codec, magic, payloads); plain entries
# hold exactly one payload, wrappers one or more.
entry = st.one_of(
    st.tuples(
        st.just(Compression.NONE),
        st.sampled_from([0, 1]),
        st.lists(payload, min_size=1, max_size=1),
    ),
    st.tuples(
        st.sampled_from([Compression.GZIP, Compression.SNAPPY]),
        st.just(1),
        st.lists(payload, min_size=1, max_size=8),
    ),
)
entry_lists = st.lists(entry, max_size=8)


def build(entries: list[tuple[Compression, int, list[bytes]]]) -> tuple[bytes, list[int]]:
    """Encode entries; return the set and the boundary after each top-level entry."""
    parts, ends, total = [], [], 0
    for codec, magic, payloads in entries:
        part = encode_message_set(payloads, compression=codec, magic=magic)
        parts.append(part)
        total += len(part)
        ends.append(total)
    return b"".join(parts), ends


def expected_messages(
    entries: list[tuple[Compression, int, list[bytes]]], base: int
) -> list[Message]:
    out, pos = [], 0
    for codec, magic, payloads in entries:
        size = len(encode_message_set(payloads, compression=codec, magic=magic))
        if codec is Compression.NONE:
            out.append(Message(base + pos + size, payloads[0], magic, 0))
        else:
            out += [Message(base + pos, p, 1, 0) for p in payloads[:-1]]
            out.append(Message(base + pos + size, payloads[-1], 1, 0))
        pos += size
    return out


@given(
    payload_lists,
    st.integers(-1, (1 << 31) - 1),
    st.text(alphabet="abcXYZ_-é", min_size=1, max_size=20),
    st.integers(-3, 3),
)
def test_a_produce_frame_in_one_buffer_is_the_request_around_the_set(
    impl: ModuleType, payloads: list[bytes], partition: int, topic: str, error: int
) -> None:
    """The producer's one-buffer frame is byte for byte the PRODUCE request around the
    encoded set; a payload total that is not the payloads' is refused, never sent."""
    wanted = encode_produce_request(topic, partition, encode_message_set(payloads))
    total = sum(map(len, payloads))
    if error == 0:
        assert encode_produce_frame(topic, partition, payloads, total) == wanted
    else:
        with pytest.raises(ValueError, match=r"payloads' total length|message set size"):
            encode_produce_frame(topic, partition, payloads, total + error)


def outcome(call: Any) -> Any:
    """A call's result, or its error type, message and position (to compare two codecs)."""
    try:
        return ("ok", call())
    except ProtocolError as exc:
        return ("error", type(exc), str(exc), exc.position)


@given(entry_lists, st.integers(0, 1 << 40))
def test_message_set_roundtrip(impl: ModuleType, entries: Any, base: int) -> None:
    data, _ = build(entries)
    decoded = decode_message_set(data, base)
    assert decoded.messages == expected_messages(entries, base)
    assert decoded.valid_bytes == len(data)
    shallow = decode_message_set(data, base, shallow=True)
    assert len(shallow.messages) == len(entries)
    assert [m.compression for m in shallow.messages] == [c for c, _, _ in entries]


@given(entry_lists.filter(bool), st.data())
def test_every_truncation_yields_exactly_the_complete_entries(
    impl: ModuleType, entries: Any, data: st.DataObject
) -> None:
    buf, ends = build(entries)
    cuts = (
        range(len(buf) + 1)
        if len(buf) <= 300
        else data.draw(st.lists(st.integers(0, len(buf)), min_size=50, max_size=50))
    )
    for cut in cuts:
        complete = sum(1 for end in ends if end <= cut)
        if complete == 0 and cut >= 4:
            with pytest.raises(InvalidMessageSizeError):
                decode_message_set(buf[:cut])
            continue
        decoded = decode_message_set(buf[:cut], 0)
        assert decoded.messages == expected_messages(entries[:complete], 0)
        assert decoded.valid_bytes == (ends[complete - 1] if complete else 0)


@given(st.binary(max_size=400), st.integers(0, 1 << 40), st.booleans())
@example(b"\x00\x00\x00\x06\x01\x02\x00\x00\x00\x00", 0, False)  # empty snappy wrapper
@example(b"\x7f\xff\xff\xff\x01", 0, False)  # absurd size
def test_arbitrary_bytes_give_messages_or_a_typed_error(
    impl: ModuleType, data: bytes, base: int, shallow: bool
) -> None:
    try:
        decoded = decode_message_set(data, base, shallow=shallow)
    except ProtocolError as exc:
        position = exc.position
    else:
        assert 0 <= decoded.valid_bytes <= len(data)
        return
    assert position is not None
    assert 0 <= position <= len(data)


@given(
    entry_lists.filter(bool),
    st.lists(st.tuples(st.integers(0), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_corrupted_sets_give_messages_or_a_typed_error(
    impl: ModuleType, entries: Any, flips: list[tuple[int, int]]
) -> None:
    buf = bytearray(build(entries)[0])
    for where, value in flips:
        buf[where % len(buf)] = value
    try:
        decoded = decode_message_set(bytes(buf))
    except ProtocolError:
        return
    # Whatever decodes must have passed its CRC check.
    for message in decoded.messages:
        assert isinstance(message.value, bytes)


@pytest.mark.skipif(len(IMPLEMENTATIONS) < 2, reason="the C accelerator is not built here")
@given(
    st.one_of(
        st.binary(max_size=300),
        entry_lists.map(lambda e: build(e)[0]),
        st.tuples(entry_lists.filter(bool), st.integers(0), st.integers(0, 255)).map(
            lambda t: _flip(build(t[0])[0], t[1], t[2])
        ),
    ),
    st.integers(0, 1 << 40),
    st.booleans(),
)
def test_c_and_python_codecs_agree(data: bytes, base: int, shallow: bool) -> None:
    fast, pure = IMPLEMENTATIONS
    saved = _accel.impl
    try:
        _accel.impl = fast
        a = outcome(lambda: decode_message_set(data, base, shallow=shallow))
        _accel.impl = pure
        b = outcome(lambda: decode_message_set(data, base, shallow=shallow))
    finally:
        _accel.impl = saved
    assert a == b


ANY_SET = st.one_of(
    st.binary(max_size=300),
    entry_lists.map(lambda e: build(e)[0]),
    st.tuples(entry_lists.filter(bool), st.integers(0), st.integers(0, 255)).map(
        lambda t: _flip(build(t[0])[0], t[1], t[2])
    ),
)


@pytest.mark.skipif(len(IMPLEMENTATIONS) < 2, reason="the C accelerator is not built here")
@given(ANY_SET, st.booleans(), st.integers(0, 300))
def test_c_and_python_summaries_agree(data: bytes, shallow: bool, start: int) -> None:
    fast, pure = IMPLEMENTATIONS
    pos = min(start, len(data))
    assert fast.summarize(data, pos, shallow) == pure.summarize(data, pos, shallow)


@given(ANY_SET, st.integers(0, 5000))
def test_counting_agrees_with_decoding(impl: ModuleType, data: bytes, bound: int) -> None:
    """The broker's count (nothing built) finds what decoding finds: the same number of
    messages, or the same error at the same position, within the same bound (except
    that past the bound counting refuses the set, where decoding stops in front of the
    wrapper that crosses it)."""
    decoded = outcome(lambda: len(decode_message_set(data, max_decompressed=bound).messages))
    over: int | None = None
    try:
        counted: Any = ("ok", count_messages(data, max_decompressed=bound))
    except ProtocolError as exc:
        counted = ("error", type(exc), str(exc), exc.position)
        over = exc.limit if isinstance(exc, CompressionError) else None
    if over is not None:
        assert over == bound
        assert decoded[0] == "ok" or decoded[1] is CompressionError
        return
    assert decoded == counted
    summary = outcome(lambda: summarize_message_set(data))
    shallow = outcome(lambda: decode_message_set(data, shallow=True))
    if summary[0] == "ok":
        assert shallow[0] == "ok"
        assert summary[1].messages == len(shallow[1].messages)
        assert summary[1].valid_bytes == shallow[1].valid_bytes
    else:
        assert summary == shallow


def _flip(buf: bytes, where: int, value: int) -> bytes:
    out = bytearray(buf)
    out[where % len(out)] = value
    return bytes(out)


@pytest.mark.skipif(len(IMPLEMENTATIONS) < 2, reason="the C accelerator is not built here")
@given(payload_lists, st.sampled_from([0, 1]))
def test_c_and_python_encoders_agree(payloads: list[bytes], magic: int) -> None:
    fast, pure = IMPLEMENTATIONS
    assert fast.encode_message_set(payloads, magic, 0) == pure.encode_message_set(
        payloads, magic, 0
    )
    for p in payloads:
        assert fast.crc32(p) == pure.crc32(p)


def _crc_paths(impl: ModuleType) -> Iterator[str]:
    """Each way ``impl`` computes a CRC-32 here: the C twin's carry-less fold where the CPU
    has it, then its table (the path of every CPU without the instruction); the pure
    twin's zlib."""
    fold = getattr(impl, "_crc_fold", None)
    if fold is None:
        yield "zlib"
        return
    had = fold(True)
    try:
        if had:
            yield "fold"
        fold(False)
        yield "table"
    finally:
        fold(had)


@given(st.binary(max_size=5000), st.integers(0, 15), st.integers(0, 0xFFFFFFFF))
@example(bytes(range(256)) * 8, 0, 0)
@example(b"\xff" * 64, 0, 0xFFFFFFFF)
@example(b"\x00" * 4096, 3, 1)  # the length from which the C twin lets other threads run
def test_crc32_of_any_bytes_matches_zlib(
    impl: ModuleType, data: bytes, skip: int, value: int
) -> None:
    """Every length (the C twin folds 64 and 16 bytes at a time where the CPU can, and
    takes the rest 8, 4 and 1 bytes at a time), every alignment, any running value."""
    view = memoryview(data)[skip:]
    for _ in _crc_paths(impl):
        assert impl.crc32(view) == zlib.crc32(view)
        assert impl.crc32(view, value) == zlib.crc32(view, value)


@pytest.mark.skipif(len(IMPLEMENTATIONS) < 2, reason="the C accelerator is not built here")
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 only")
def test_the_crc_fold_is_used_where_the_cpu_has_it() -> None:
    """On x86-64 the carry-less fold is built in and chosen when the CPU has PCLMULQDQ
    (not silently left out by the preprocessor checks that keep other machines building)."""
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    flags = next((line for line in cpuinfo if line.startswith("flags")), "").split()
    fold = IMPLEMENTATIONS[0]._crc_fold
    had = fold(True)
    fold(had)
    assert had is ("pclmulqdq" in flags)


# --- compression --------------------------------------------------------------------

BOUNDARY_SIZES = [0, 1, 32767, 32768, 32769, 65535, 65536, 65537, (1 << 20) + 3]


@given(
    st.sampled_from(BOUNDARY_SIZES),
    st.integers(0, 2**32),
    st.sampled_from(["random", "text", "zeros"]),
)
def test_compression_roundtrip_across_chunk_boundaries(size: int, seed: int, kind: str) -> None:
    rng = random.Random(seed)
    if kind == "random":
        data = rng.randbytes(size)
    elif kind == "text":
        words = [b"page", b"view", b"user", b"click", b" ", b"\n"]
        parts, length = [], 0
        while length < size:  # random words up to the size (not size words: 3x the time)
            parts.append(rng.choice(words))
            length += len(parts[-1])
        data = b"".join(parts)[:size]
    else:
        data = bytes(size)
    assert snappy_decompress(snappy_compress(data)) == data
    assert gzip_decompress(gzip_compress(data)) == data


@given(payload_lists.filter(bool), codecs)
def test_compressed_set_roundtrip(payloads: list[bytes], codec: Compression) -> None:
    data = encode_message_set(payloads, compression=codec)
    assert [m.value for m in decode_message_set(data).messages] == payloads


@given(st.binary(max_size=300))
def test_arbitrary_bytes_decompress_or_raise_compression_error(data: bytes) -> None:
    for decompress in (snappy_decompress, gzip_decompress):
        with contextlib.suppress(CompressionError):
            decompress(data)
    with contextlib.suppress(CompressionError):
        snappy_decompress(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01" + data)


def _inflate_answer(
    impl: ModuleType, data: bytes, pos: int, limit: int, hint: int
) -> tuple[Any, ...]:
    status, result, end, crc = impl.inflate(data, pos, limit, hint)
    return status, bytes(result) if status == _pure.IN_OK else result, end, crc


@pytest.mark.skipif(len(IMPLEMENTATIONS) < 2, reason="the C accelerator is not built here")
@given(
    st.binary(max_size=6000) | st.text(max_size=6000).map(str.encode),
    st.integers(0, 9),
    st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=3),
    st.integers(0, 1 << 13),
    st.integers(0, 8000),
    st.integers(0, 9000),
)
@example(b"x" * 100, 6, [], 0, 100, 100)  # exactly the bound, the hint exact
@example(b"x" * 5000, 6, [], 0, 5000, 1)  # the output grows from a tiny hint
@example(b"x" * 5000, 6, [], 0, 4999, 9000)  # one byte over
@example(b"", 6, [], 0, 0, 0)  # nothing, within a bound of nothing
@example(b"x", 0, [], 0, 0, 0)  # one byte over a bound of nothing
@example(b"\x00\x00\xf0", 1, [(1, 32)], 0, 0, 0)  # a bad code right after the byte over
def test_c_and_python_inflaters_agree(
    data: bytes, level: int, flips: list[tuple[int, int]], cut: int, limit: int, hint: int
) -> None:
    """A gzip member's deflate data, whole, then with bytes changed and the end cut: the
    same output, end and CRC, or the same status and message, from both twins; the data
    itself back when nothing was changed and the bound allows."""
    fast, pure = IMPLEMENTATIONS
    member = gzip_compress(data, level) + b"trailing"
    whole = _inflate_answer(fast, member, 10, limit, hint)
    assert whole == _inflate_answer(pure, member, 10, limit, hint)
    if len(data) <= limit:
        assert whole == (_pure.IN_OK, data, len(member) - 16, zlib.crc32(data))
    else:
        assert whole == (_pure.IN_OVER, None, 0, 0)
    mutant = bytearray(member)
    for where, value in flips:
        mutant[10 + where % (len(mutant) - 10)] = value
    del mutant[len(mutant) - cut % (len(mutant) - 9) :]
    assert _inflate_answer(fast, bytes(mutant), 10, limit, hint) == _inflate_answer(
        pure, bytes(mutant), 10, limit, hint
    )


# --- requests and responses -----------------------------------------------------------

topics = st.text(
    st.characters(
        min_codepoint=0x20,
        max_codepoint=0xFFEF,
        exclude_characters="/",
        exclude_categories=("Cs", "Co", "Cc"),
    ),
    min_size=1,
    max_size=40,
).filter(lambda t: t not in (".", ".."))
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)
nonneg32 = st.integers(0, (1 << 31) - 1)
produces = st.builds(
    ProduceRequest, topics, int32, payload_lists.map(lambda p: encode_message_set(p))
)
fetches = st.builds(FetchRequest, topics, int32, int64, nonneg32)
requests = st.one_of(
    produces,
    fetches,
    st.builds(OffsetsRequest, topics, int32, int64, nonneg32),
    st.builds(MultiFetchRequest, st.lists(fetches, max_size=5).map(tuple)),
    st.builds(MultiProduceRequest, st.lists(produces, max_size=5).map(tuple)),
)


@given(requests)
def test_request_roundtrip_and_every_truncation_fails(request: Any) -> None:
    frame = encode_request(request)
    body = frame[4:]
    assert int.from_bytes(frame[:4], "big") == len(body)
    assert decode_request(body) == request
    for cut in range(len(body)):
        with pytest.raises(MalformedFrameError):
            decode_request(body[:cut])


@given(st.binary(max_size=200))
def test_arbitrary_request_bytes_give_a_request_or_a_typed_error(data: bytes) -> None:
    with contextlib.suppress(MalformedFrameError):
        decode_request(data)


fetch_responses = st.builds(
    FetchResponse,
    st.sampled_from([0, 1, 3, -1]),
    payload_lists.map(lambda p: encode_message_set(p)),
)


@given(st.lists(fetch_responses, max_size=6), st.lists(int64, max_size=10))
def test_response_roundtrips(responses: list[FetchResponse], offsets: list[int]) -> None:
    for response in responses:
        assert decode_fetch_response(encode_fetch_response(*response)[4:]) == response
    multi = encode_multifetch_response(responses)
    assert list(decode_multifetch_response(multi[4:], count=len(responses)).responses) == responses
    frame = encode_offsets_response(offsets)[4:]
    assert list(decode_offsets_response(frame).offsets) == offsets
    for cut in range(2, len(frame)):
        with pytest.raises(MalformedFrameError):
            decode_offsets_response(frame[:cut])


@given(st.binary(max_size=200))
def test_arbitrary_response_bytes_give_values_or_typed_errors(data: bytes) -> None:
    for decode in (decode_fetch_response, decode_multifetch_response, decode_offsets_response):
        with contextlib.suppress(MalformedFrameError):
            decode(data)


@given(st.lists(fetch_responses, max_size=8), st.lists(st.integers(1, 64), min_size=1))
def test_splitter_gives_the_same_frames_however_bytes_arrive(
    responses: list[FetchResponse], chunk_sizes: list[int]
) -> None:
    frames = [encode_fetch_response(*r) for r in responses]
    stream = b"".join(frames)
    splitter = FrameSplitter()
    got: list[bytes] = []
    pos, i = 0, 0
    while pos < len(stream):
        step = chunk_sizes[i % len(chunk_sizes)]
        got += splitter.feed(stream[pos : pos + step])
        pos += step
        i += 1
    assert got == [f[4:] for f in frames]
    assert splitter.buffered == 0


@given(st.binary(max_size=300), st.lists(st.integers(1, 50), min_size=1))
def test_splitter_on_garbage_gives_frames_or_a_typed_error(
    data: bytes, chunk_sizes: list[int]
) -> None:
    splitter = FrameSplitter(min_size=2, max_size=1 << 20)
    pos, i = 0, 0
    try:
        while pos < len(data):
            step = chunk_sizes[i % len(chunk_sizes)]
            for frame in splitter.feed(data[pos : pos + step]):
                assert len(frame) >= 2
            pos += step
            i += 1
    except MalformedFrameError:
        pass
    assert splitter.buffered <= len(data)


def _read(splitter: FrameSplitter, chunk: bytes, in_place: bool) -> tuple[int, list[Any]]:
    """One read as a connection does it: into the view ``reserve()`` offers when asked to
    read in place and there is one (at most its length), else handed to ``feed()``. The
    bytes taken, and the frames completed."""
    view = splitter.reserve() if in_place else None
    if view is None:
        return len(chunk), splitter.feed(chunk)
    taken = min(len(chunk), len(view))
    view[:taken] = chunk[:taken]
    splitter.received_into(taken)
    return taken, splitter.feed(b"")  # nothing more: the frames completed


@given(
    st.lists(st.sampled_from([2, 3, 100, 65_535, 65_536, 70_000, 200_000]), max_size=6),
    st.lists(st.integers(1, 100_000), min_size=1, max_size=20),
    st.booleans(),
    st.booleans(),
)
# Fewer examples than the profile's: each may feed a megabyte in chunks of a few bytes.
@settings(max_examples=min(50, settings.default.max_examples))
def test_splitter_collects_large_frames_the_same_however_bytes_arrive(
    sizes: list[int], chunk_sizes: list[int], bad_tail: bool, in_place: bool
) -> None:
    """Large bodies are collected as chunks (FrameSplitter.COLLECT_FROM), or read in place
    (``reserve``): the frames, ``buffered`` and the stream position of a bad frame after
    them are as for small ones; a body read in place is the bytearray it was read into."""
    frames = [len(body).to_bytes(4, "big") + body for body in (bytes([n % 251]) * n for n in sizes)]
    stream = b"".join(frames)
    tail = (3 << 20).to_bytes(4, "big") if bad_tail else b""  # over max_size
    splitter = FrameSplitter(min_size=2, max_size=1 << 20)
    got: list[bytes] = []
    pos, i = 0, 0
    data = stream + tail
    with contextlib.ExitStack() as stack:
        if bad_tail:
            error = stack.enter_context(pytest.raises(MalformedFrameError))
        while pos < len(data):
            chunk = data[pos : pos + chunk_sizes[i % len(chunk_sizes)]]
            try:
                taken, completed = _read(splitter, chunk, in_place)
            except MalformedFrameError as exc:
                got += exc.decoded
                raise
            got += completed
            pos += taken
            i += 1
            assert splitter.buffered == pos - sum(len(f) + 4 for f in got)
    assert got == [f[4:] for f in frames]
    small = [body for body in got if len(body) < FrameSplitter.COLLECT_FROM]
    assert all(type(body) is bytes for body in (got if not in_place else small))
    if bad_tail:
        assert error.value.position == len(stream)
    else:
        assert splitter.buffered == 0


# -- BatchBuilder.append: the C appender and its pure twin --------------------------------------

_APPENDS = st.lists(
    st.tuples(
        st.one_of(
            st.binary(max_size=40),
            st.text(max_size=10),
            st.integers(),
            st.builds(bytearray, st.binary(max_size=10)),
        ),
        st.sampled_from([None, None, None, "k", 0]),  # key
    ),
    max_size=40,
)


def test_batch_builder_append_is_a_c_method_of_batch_builder_itself() -> None:
    """With the accelerator active, ``BatchBuilder.append`` is the C append as a method
    of ``BatchBuilder`` (the interpreter specialises a C method's call only on an
    instance of exactly its type: inherited from ``Appender``, every call took the
    generic path, ~35 ns a message); ``append_method`` takes subclasses of ``Appender``
    only."""
    from aiokafka07.producer import batch

    if batch._Appender is batch._PureAppender:
        pytest.skip("the producer's C accelerator is not active")
    from aiokafka07.producer import _appender  # type: ignore[attr-defined]

    descriptor = batch.BatchBuilder.__dict__["append"]
    assert type(descriptor).__name__ == "method_descriptor"
    assert descriptor.__objclass__ is batch.BatchBuilder
    builder = batch.BatchBuilder(max_count=2, max_bytes=100, max_message_size=10, serializer=None)
    assert [builder.append(b"a"), builder.append(b"b"), builder.append(b"c")] == [0, 1, None]
    for other in (int, _appender.HotPath, object()):
        with pytest.raises(TypeError, match="subclass of Appender"):
            _appender.append_method(other)


@settings(max_examples=150)
@given(
    appends=_APPENDS,
    max_count=st.integers(1, 30),
    max_bytes=st.integers(1, 200),
    max_message=st.integers(0, 50),
    serializer=st.sampled_from([None, lambda v: repr(v).encode()]),
    close_at=st.integers(0, 45),
)
def test_batch_builder_twins_agree(
    appends: list[tuple[Any, Any]],
    max_count: int,
    max_bytes: int,
    max_message: int,
    serializer: Any,
    close_at: int,
) -> None:
    """The C ``append`` (when built) and the pure twin return the same positions, refuse
    the same messages with the same errors, and end with the same values and size."""
    from aiokafka07.producer.batch import BatchBuilder, pure_batch_builder

    builders = [
        cls(
            max_count=max_count,
            max_bytes=max_bytes,
            max_message_size=max_message,
            serializer=serializer,
        )
        for cls in (BatchBuilder, pure_batch_builder())
    ]
    outcomes: list[list[Any]] = [[], []]
    for n, (value, key) in enumerate(appends):
        for builder, seen in zip(builders, outcomes, strict=True):
            if n == close_at:
                builder.close()
            try:
                if key is None:
                    seen.append(builder.append(value))
                else:
                    seen.append(builder.append(value, key=key))
            except Exception as exc:
                seen.append((type(exc), str(exc)))
    assert outcomes[0] == outcomes[1]
    c, pure = builders
    assert (c.values, c.size_bytes, c.record_count(), len(c), c.closed) == (
        pure.values,
        pure.size_bytes,
        pure.record_count(),
        len(pure),
        pure.closed,
    )


def test_batch_builder_positions_past_cached_ints() -> None:
    """Positions past CPython's cached small ints (256) and past the C appender's own
    cache of position ints (16384), in two batches (the second reuses the cache), are
    the same from both twins: 0, 1, 2, ... in order, every value kept."""
    from aiokafka07.producer.batch import BatchBuilder, pure_batch_builder

    count = 16384 + 300
    for cls in (BatchBuilder, pure_batch_builder()):
        for _ in range(2):
            builder = cls(max_count=count, max_bytes=count, max_message_size=1, serializer=None)
            positions = [builder.append(b"x") for _ in range(count)]
            assert positions == list(range(count))
            assert builder.append(b"x") is None  # full
            assert (len(builder.values), builder.size_bytes) == (count, count)


_HOT_APPENDS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),  # topic ("c" never hot)
        st.one_of(
            st.binary(max_size=12),
            st.text(max_size=4),
            st.builds(bytearray, st.binary(max_size=4)),
        ),
    ),
    max_size=60,
)


@settings(max_examples=150)
@given(
    appends=_HOT_APPENDS,
    caps=st.tuples(st.integers(0, 12), st.integers(0, 60), st.integers(0, 12), st.integers(0, 60)),
    max_message=st.integers(0, 12),
    cool=st.booleans(),
    keywords=st.booleans(),
)
def test_send_hot_path_twins_agree(
    appends: list[tuple[str, Any]],
    caps: tuple[int, int, int, int],
    max_message: int,
    cool: bool,
    keywords: bool,
) -> None:
    """send()'s hot path in C (``HotPath`` over ``BatchCore``, when built) and its pure
    twin take the same messages into the same batches with one future each, refuse the
    same ones (None, nothing taken), and call ``capped`` at the same moments; ``cool``:
    ``capped`` takes the batch off the hot path, as the accumulator does; ``keywords``:
    ``create_future`` is called with ``future_kwargs``, the same dict every time."""
    from aiokafka07.producer import accumulator, batch

    try:
        from aiokafka07.producer import _appender  # type: ignore[attr-defined]
    except ImportError:
        pytest.skip("the producer's C accelerator was not built")

    class PureBatch(batch._PureBatchCore):
        __slots__ = ()

    def run(batch_type: type[Any], hot_path_type: type[Any]) -> list[Any]:
        seen: list[Any] = []
        batches = {}
        for topic, (count_cap, byte_cap) in {"a": caps[:2], "b": caps[2:]}.items():
            b = batch_type()
            b.values, b.futures, b.size = [], [], 0
            b.count_cap, b.byte_cap = count_cap, byte_cap
            batches[topic] = b
        hot = dict(batches)
        made = iter(range(10**6))

        def capped(b: Any) -> None:
            seen.append(("capped", next(k for k, v in batches.items() if v is b)))
            if cool:
                del hot[next(k for k, v in hot.items() if v is b)]

        kwargs = {"tag": "k"}

        def create_future(**given: Any) -> tuple[Any, ...]:
            return ("future", next(made), given)

        path = hot_path_type(hot, create_future, capped, max_message)
        if keywords:
            path.future_kwargs = kwargs
        for topic, value in appends:
            seen.append(path.append(topic, value))
        seen.extend((b.values, b.futures, b.size) for b in batches.values())
        return seen

    pure = run(PureBatch, accumulator._PureHotPath)
    assert run(_appender.BatchCore, _appender.HotPath) == pure
    assert run(batch.Batch.__mro__[1], accumulator.HotPath) == pure


def test_c_hot_path_takes_batches_of_batch_core_and_its_subclasses_only() -> None:
    """The C hot path takes a message into a hot batch whose type is ``BatchCore`` or any
    subclass of it (the producer's ``Batch``, its direct subclass, checked first; a
    subclass of that), and refuses (None, nothing taken) any other object."""
    from aiokafka07.producer import batch

    if batch._BatchCore is batch._PureBatchCore:
        pytest.skip("the producer's C accelerator is not active")
    from aiokafka07.producer import _appender  # type: ignore[attr-defined]

    class Deeper(batch.Batch):
        __slots__ = ()

    class PureBatch(batch._PureBatchCore):
        __slots__ = ()

    def hot_batch(kind: type[Any]) -> Any:
        b = kind("t", 0, 0) if issubclass(kind, batch.Batch) else kind()
        b.values, b.futures, b.size, b.count_cap, b.byte_cap = [], [], 0, 10, 100
        return b

    for kind, taken in (
        (_appender.BatchCore, True),
        (batch.Batch, True),
        (Deeper, True),
        (PureBatch, False),
    ):
        b = hot_batch(kind)
        path = _appender.HotPath({"t": b}, lambda: "future", lambda _: None, 10)
        assert path.append("t", b"v") == ("future" if taken else None), kind
        assert b.values == ([b"v"] if taken else []), kind


def test_send_hot_path_twins_refuse_future_kwargs_that_are_not_a_dict() -> None:
    """A ``future_kwargs`` neither None nor a dict is a TypeError from both twins, and
    the message is not taken (no future made, nothing appended)."""
    from aiokafka07.producer import accumulator, batch

    twins: list[tuple[type[Any], type[Any]]] = [(batch._PureBatchCore, accumulator._PureHotPath)]
    try:
        from aiokafka07.producer import _appender  # type: ignore[attr-defined]
    except ImportError:
        pass
    else:
        twins.append((_appender.BatchCore, _appender.HotPath))
    for batch_type, hot_path_type in twins:
        b = batch_type()
        b.values, b.futures, b.size, b.count_cap, b.byte_cap = [], [], 0, 10, 100
        made: list[object] = []

        def create_future(made: list[object] = made, **kw: Any) -> str:
            made.append(kw)
            return "future"

        path = hot_path_type({"t": b}, create_future, lambda _: None, 10)
        path.future_kwargs = [("loop", None)]
        with pytest.raises(TypeError, match="future_kwargs must be a dict or None"):
            path.append("t", b"v")
        assert (made, b.values, b.futures, b.size) == ([], [], [], 0)
        path.future_kwargs = None
        assert path.append("t", b"v") == "future"
        assert (made, b.values, b.futures) == ([{}], [b"v"], ["future"])
