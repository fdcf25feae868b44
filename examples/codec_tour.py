"""A tour of the sans-IO Kafka 0.7 codec: both ends of one produce and one fetch.

No sockets: the bytes a client would write are decoded as a broker would decode them,
the broker's answer is cut the way a real 0.7 broker cuts it (at ``max_size`` bytes,
usually in the middle of a message) and handed back in the small pieces a socket
delivers. The consumer side then finds the complete messages, their 0.7.2 offsets and
where to fetch next.

Run: ``python examples/codec_tour.py``
"""

from __future__ import annotations

from aiokafka07.protocol import (
    FetchRequest,
    FrameSplitter,
    ProduceRequest,
    decode_fetch_response,
    decode_message_set,
    decode_request,
    encode_fetch_request,
    encode_fetch_response,
    encode_message_set,
    encode_multiproduce_request,
)


def main() -> None:
    # Producer side: one MULTIPRODUCE with a plain set, a gzip set and a snappy set.
    views = [f'{{"user": {u}, "page": "/item/{u * 7}"}}'.encode() for u in range(9)]
    request = encode_multiproduce_request(
        [
            ("page-views", 0, encode_message_set(views[:3])),
            ("page-views", 0, encode_message_set(views[3:6], compression="gzip")),
            ("page-views", 0, encode_message_set(views[6:], compression="snappy")),
        ]
    )
    print(f"client writes a {len(request)}-byte MULTIPRODUCE request (no response comes back)")

    # Broker side: parse the frame and append the sets to the log.
    (frame,) = FrameSplitter(min_size=1).feed(request)
    produce = decode_request(frame)
    log = bytearray()
    for entry in produce.produces:  # type: ignore[union-attr]
        assert isinstance(entry, ProduceRequest)
        log += entry.message_set
    print(f"broker appends {len(log)} bytes to page-views-0")

    # Consumer side: fetch from offset 0 with a max size that cuts the last message.
    fetch = encode_fetch_request("page-views", 0, 0, max_size=len(log) - 5)
    wanted = decode_request(FrameSplitter(min_size=1).feed(fetch)[0])
    assert isinstance(wanted, FetchRequest)
    response = encode_fetch_response(0, bytes(log[wanted.offset : wanted.offset + wanted.max_size]))

    splitter = FrameSplitter()
    frames: list[bytes] = []
    for start in range(0, len(response), 64):  # a socket hands bytes over in pieces
        frames += splitter.feed(response[start : start + 64])
    fetched = decode_fetch_response(frames[0])
    result = decode_message_set(fetched.message_set, base_offset=wanted.offset)

    for message in result.messages:
        print(f"  offset {message.offset:4d}  {message.value.decode()}")
    next_offset = wanted.offset + result.valid_bytes
    print(
        f"{len(result.messages)} messages; the partial tail was dropped; "
        f"fetch next at offset {next_offset} (log end {len(log)})"
    )
    # Fetch again from there: the rest of the log.
    rest = decode_message_set(bytes(log[next_offset:]), base_offset=next_offset)
    print(f"the next fetch returns {len(rest.messages)} more, ending at {rest.messages[-1].offset}")


if __name__ == "__main__":
    main()
