"""The Arrow C data interface, written with ctypes: the pure-Python twin of the C
accelerator's ``arrow_schema`` / ``arrow_array`` / ``arrow_stream``
(``protocol/_speedups.c``, chosen by ``protocol/_accel.py``). No pyarrow is needed to
export.

:class:`~aiokafka07.RecordBatch` hands its columns to Arrow consumers (pyarrow, polars,
duckdb, nanoarrow) through the Arrow PyCapsule interface: an ``ArrowSchema`` and an
``ArrowArray`` struct (https://arrow.apache.org/docs/format/CDataInterface.html), each in
a capsule named ``"arrow_schema"`` / ``"arrow_array"``. The structs point straight at the
batch's buffers, so the consumer reads them without a copy.

Lifetimes, as the spec requires. A struct's ``release`` callback is :func:`_release_schema`
or :func:`_release_array`; its ``private_data`` is a key into :data:`_KEEP`, which holds
everything the struct points to (strings, pointer arrays, children, and the objects owning
the buffers: a buffer stays alive, and its bytearray cannot be resized, until the
consumer calls ``release``). A consumer *moves* a struct out of its capsule (copies it,
sets the original's ``release`` to NULL) and releases its copy whenever it likes, maybe
long after the capsule is gone: so the capsule owns only the struct's own memory
(:data:`_CAPSULES`), and its destructor releases the struct only if nobody moved it.
Children have their own release and key, so a child moved out on its own outlives its
parent; a parent's release releases the children still in place.

ctypes callbacks take the GIL themselves, so a consumer may release from any thread.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ArrowArray",
    "ArrowArrayStream",
    "ArrowSchema",
    "Field",
    "array_capsule",
    "schema_capsule",
    "stream_capsule",
]

#: ``ArrowSchema.flags``: the field may hold nulls (none of ours do).
FLAG_NULLABLE = 2

SCHEMA_NAME = b"arrow_schema"
ARRAY_NAME = b"arrow_array"


class ArrowSchema(ctypes.Structure):
    """``struct ArrowSchema`` (pointers as ``c_void_p``: they point into :data:`_KEEP`)."""

    _fields_ = [
        ("format", ctypes.c_void_p),
        ("name", ctypes.c_void_p),
        ("metadata", ctypes.c_void_p),
        ("flags", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


class ArrowArray(ctypes.Structure):
    """``struct ArrowArray``."""

    _fields_ = [
        ("length", ctypes.c_int64),
        ("null_count", ctypes.c_int64),
        ("offset", ctypes.c_int64),
        ("n_buffers", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("buffers", ctypes.c_void_p),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


_RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

# Function objects of our own (``ctypes.pythonapi.X`` is one shared object whose argtypes
# anyone may set), called with the GIL held.
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR)(
    ("PyCapsule_New", ctypes.pythonapi)
)
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)

#: What the structs exported and not yet released point to, by ``private_data`` key.
_KEEP: dict[int, list[Any]] = {}
#: The memory of the structs inside live capsules, by address.
_CAPSULES: dict[int, ctypes.Structure] = {}
_keys = itertools.count(1)
#: Where an empty buffer points: Arrow wants a non-NULL, aligned pointer.
_EMPTY = (ctypes.c_int64 * 8)()


def _children(address: int, n: int) -> list[int]:
    return list((ctypes.c_void_p * n).from_address(address)) if n else []


def _release_schema(address: int) -> None:
    schema = ArrowSchema.from_address(address)
    for child in _children(schema.children or 0, schema.n_children):
        release = ArrowSchema.from_address(child).release
        if release:
            _RELEASE(release)(child)
    _KEEP.pop(schema.private_data or 0, None)
    schema.release = None


def _release_array(address: int) -> None:
    array = ArrowArray.from_address(address)
    for child in _children(array.children or 0, array.n_children):
        release = ArrowArray.from_address(child).release
        if release:
            _RELEASE(release)(child)
    _KEEP.pop(array.private_data or 0, None)
    array.release = None


def _destroy(kind: type[ctypes.Structure], name: bytes) -> Any:
    def destroy(capsule: int) -> None:
        address = _capsule_pointer(capsule, name)
        if address:
            struct_ = kind.from_address(address)
            release = struct_.release
            if release:  # not moved out by a consumer: release it here
                _RELEASE(release)(address)
            _CAPSULES.pop(address, None)

    return _DESTRUCTOR(destroy)


#: The C function pointers of the callbacks (alive as long as the module).
_SCHEMA_RELEASE = _RELEASE(_release_schema)
_ARRAY_RELEASE = _RELEASE(_release_array)
_destroy_schema = _destroy(ArrowSchema, SCHEMA_NAME)
_destroy_array = _destroy(ArrowArray, ARRAY_NAME)


def _capsule(struct_: ctypes.Structure, name: bytes, destroy: Any) -> object:
    address = ctypes.addressof(struct_)
    _CAPSULES[address] = struct_
    capsule: object = _capsule_new(address, name, destroy)
    return capsule


def _string(text: str, keep: list[Any]) -> int:
    buffer = ctypes.create_string_buffer(text.encode())
    keep.append(buffer)
    return ctypes.addressof(buffer)


def _metadata(metadata: bytes, keep: list[Any]) -> int | None:
    if not metadata:
        return None
    buffer = ctypes.create_string_buffer(metadata, len(metadata))
    keep.append(buffer)
    return ctypes.addressof(buffer)


def _pointers(addresses: Sequence[int | None], keep: list[Any]) -> int | None:
    if not addresses:
        return None
    array = (ctypes.c_void_p * len(addresses))(*addresses)
    keep.append(array)
    return ctypes.addressof(array)


#: One column: its name, its Arrow format string (``"l"`` int64, ``"i"`` int32, ``"z"``
#: binary), and its buffers after the (absent) validity bitmap, as writable buffers
#: (bytearrays) that stay alive, and cannot be resized, while exported. A plain tuple: the
#: C twin in ``protocol/_speedups.c`` reads the same.
Field = tuple[str, str, tuple[Any, ...]]


def buffer_address(buffer: Any, keep: list[Any]) -> int:
    """The address of ``buffer``'s first byte (a ctypes view of it, kept in ``keep``,
    holds an export of it: a bytearray under it cannot be resized meanwhile)."""
    size = memoryview(buffer).nbytes
    if not size:
        return ctypes.addressof(_EMPTY)
    view = (ctypes.c_char * size).from_buffer(buffer)
    keep.append(view)
    return ctypes.addressof(view)


def _schema(name: str, format_: str, metadata: bytes, children: list[ArrowSchema]) -> ArrowSchema:
    keep: list[Any] = []
    key = next(_keys)
    schema = ArrowSchema(
        format=_string(format_, keep),
        name=_string(name, keep),
        metadata=_metadata(metadata, keep),
        flags=0,
        n_children=len(children),
        children=_pointers([ctypes.addressof(c) for c in children], keep),
        dictionary=None,
        release=ctypes.cast(_SCHEMA_RELEASE, ctypes.c_void_p).value,
        private_data=key,
    )
    keep += children
    _KEEP[key] = keep
    return schema


def schema_capsule(fields: Sequence[Field], metadata: bytes) -> object:
    """An ``"arrow_schema"`` capsule: a struct (``"+s"``) of ``fields``, none nullable,
    with ``metadata`` (Arrow's binary key-value encoding) on the struct."""
    children = [_schema(name, format_, b"", []) for name, format_, _ in fields]
    return _capsule(_schema("", "+s", metadata, children), SCHEMA_NAME, _destroy_schema)


def _array(
    length: int,
    offset: int,
    buffers: list[int | None],
    children: list[ArrowArray],
    owners: list[Any],
) -> ArrowArray:
    keep: list[Any] = list(owners)
    key = next(_keys)
    array = ArrowArray(
        length=length,
        null_count=0,
        offset=offset,
        n_buffers=len(buffers),
        n_children=len(children),
        buffers=_pointers(buffers, keep),
        children=_pointers([ctypes.addressof(c) for c in children], keep),
        dictionary=None,
        release=ctypes.cast(_ARRAY_RELEASE, ctypes.c_void_p).value,
        private_data=key,
    )
    keep += children
    _KEEP[key] = keep
    return array


def array_capsule(fields: Sequence[Field], length: int, offset: int, owner: object) -> object:
    """An ``"arrow_array"`` capsule: a struct array of ``length`` rows whose children are
    ``fields``' buffers from row ``offset`` on (no copy); ``owner`` (the batch) is kept
    alive until the consumer releases the array."""
    return _capsule(_struct_array(fields, length, offset, owner), ARRAY_NAME, _destroy_array)


def _struct_array(fields: Sequence[Field], length: int, offset: int, owner: object) -> ArrowArray:
    children = []
    for _, _, buffers in fields:
        keep: list[Any] = [owner]
        addresses: list[int | None] = [None]  # no validity bitmap: nothing is null
        addresses += [buffer_address(b, keep) for b in buffers]
        children.append(_array(length, offset, addresses, [], keep))
    return _array(length, 0, [None], children, [owner])


class ArrowArrayStream(ctypes.Structure):
    """``struct ArrowArrayStream`` (callbacks as ``c_void_p``)."""

    _fields_ = [
        ("get_schema", ctypes.c_void_p),
        ("get_next", ctypes.c_void_p),
        ("get_last_error", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


STREAM_NAME = b"arrow_array_stream"


@dataclass
class _Stream:
    """What a stream of one array hands out: its schema any number of times, its array
    once, then the end."""

    fields: Sequence[Field]
    metadata: bytes
    length: int
    offset: int
    owner: object
    done: bool = False


_STREAMS: dict[int, _Stream] = {}


def _move(struct_: ctypes.Structure, out: int) -> None:
    """Move a struct built here to ``out`` (the consumer's): its memory is then the
    consumer's, what it points to stays in :data:`_KEEP` until it is released."""
    ctypes.memmove(out, ctypes.addressof(struct_), ctypes.sizeof(struct_))


def _stream_get_schema(address: int, out: int) -> int:
    stream = _STREAMS.get(ArrowArrayStream.from_address(address).private_data or 0)
    if stream is None:
        return 22  # EINVAL: released
    children = [_schema(name, format_, b"", []) for name, format_, _ in stream.fields]
    _move(_schema("", "+s", stream.metadata, children), out)
    return 0


def _stream_get_next(address: int, out: int) -> int:
    stream = _STREAMS.get(ArrowArrayStream.from_address(address).private_data or 0)
    if stream is None:
        return 22
    if stream.done:  # the end: a released array
        ctypes.memset(out, 0, ctypes.sizeof(ArrowArray))
        return 0
    stream.done = True
    _move(_struct_array(stream.fields, stream.length, stream.offset, stream.owner), out)
    return 0


def _stream_last_error(address: int) -> int | None:
    return None


def _release_stream(address: int) -> None:
    stream = ArrowArrayStream.from_address(address)
    _STREAMS.pop(stream.private_data or 0, None)
    stream.release = None


_GET_SCHEMA = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(_stream_get_schema)
_GET_NEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(_stream_get_next)
_LAST_ERROR = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(_stream_last_error)
_STREAM_RELEASE = _RELEASE(_release_stream)
_destroy_stream = _destroy(ArrowArrayStream, STREAM_NAME)


def stream_capsule(
    fields: Sequence[Field], metadata: bytes, length: int, offset: int, owner: object
) -> object:
    """An ``"arrow_array_stream"`` capsule of one struct array (as :func:`array_capsule`
    builds it, when the consumer asks for it), for consumers that read streams (polars,
    duckdb, ``pyarrow.RecordBatchReader.from_stream``)."""
    key = next(_keys)
    _STREAMS[key] = _Stream(fields, metadata, length, offset, owner)

    def address(function: Any) -> int | None:
        value: int | None = ctypes.cast(function, ctypes.c_void_p).value
        return value

    stream = ArrowArrayStream(
        get_schema=address(_GET_SCHEMA),
        get_next=address(_GET_NEXT),
        get_last_error=address(_LAST_ERROR),
        release=address(_STREAM_RELEASE),
        private_data=key,
    )
    return _capsule(stream, STREAM_NAME, _destroy_stream)


def exported() -> int:
    """How many exported structs and streams are not released yet (for tests and leak
    checks)."""
    return len(_KEEP) + len(_STREAMS)


# -- importing: the producer's Arrow path (``encode_arrow``) ----------------------------

# Statuses of ``encode_arrow`` (``_speedups.c`` lists the same).
ARROW_OK = 0
ARROW_RELEASED = 1
ARROW_FORMAT = 2
ARROW_SHAPE = 3
ARROW_NULL = 4
ARROW_OFFSETS = 5
ARROW_TOO_LARGE = 6

#: Formats ``encode_arrow`` takes: binary and utf8 (int32 offsets), large binary and
#: large utf8 (int64 offsets).
_OFFSET_TYPES = {"z": ctypes.c_int32, "u": ctypes.c_int32, "Z": ctypes.c_int64, "U": ctypes.c_int64}

_capsule_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_pointer_of = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)

Refusal = tuple[int, int, int, "str | None", None]
Chunks = tuple[int, int, int, str, list[tuple[int, int, bytes]]]


def encode_arrow(
    schema_capsule: object,
    array_capsule: object,
    magic: int,
    attributes: int,
    max_count: int,
    max_bytes: int,
    max_message: int,
    encode: Any,
    rows: Any = None,
) -> Refusal | Chunks:
    """The pure twin of ``_speedups.c``'s ``encode_arrow`` (its comment is the contract):
    the array is moved out of its capsule and released here, its values read through
    ctypes, each chunk encoded by ``encode(payloads, magic, attributes)`` (the codec's
    ``encode_message_set``)."""
    if magic not in (0, 1):
        raise ValueError("magic must be 0 or 1")
    if not 0 <= attributes <= 255 or (magic == 0 and attributes):
        raise ValueError("attributes must be a byte (0 for magic 0)")
    if max_count < 1 or max_bytes < 1 or max_message < 0:
        raise ValueError("max_count and max_bytes must be positive")
    selection = None
    if rows is not None:
        view = memoryview(rows).cast("B")
        if len(view) % 8:
            raise ValueError("rows must be whole int64s")
        selection = view.cast("q").tolist()
    schema = source = None
    if _capsule_valid(schema_capsule, SCHEMA_NAME):
        schema = ArrowSchema.from_address(_capsule_pointer_of(schema_capsule, SCHEMA_NAME))
    if _capsule_valid(array_capsule, ARRAY_NAME):
        source = ArrowArray.from_address(_capsule_pointer_of(array_capsule, ARRAY_NAME))
    if schema is None or source is None or not schema.release or not source.release:
        return ARROW_RELEASED, 0, 0, None, None
    if not schema.format:
        return ARROW_RELEASED, 0, 0, None, None
    format_ = ctypes.string_at(schema.format).decode("utf-8", "replace")
    offset_type = _OFFSET_TYPES.get(format_)
    if offset_type is None:
        return ARROW_FORMAT, 0, 0, format_, None
    array = ArrowArray()
    ctypes.memmove(ctypes.addressof(array), ctypes.addressof(source), ctypes.sizeof(array))
    source.release = None  # moved out: ours to release
    try:
        return _encode_array(
            array,
            format_,
            offset_type,
            magic,
            attributes,
            max_count,
            max_bytes,
            max_message,
            encode,
            selection,
        )
    finally:
        if array.release:
            _RELEASE(array.release)(ctypes.addressof(array))


def _encode_array(
    array: ArrowArray,
    format_: str,
    offset_type: Any,
    magic: int,
    attributes: int,
    max_count: int,
    max_bytes: int,
    max_message: int,
    encode: Any,
    selection: list[int] | None,
) -> Refusal | Chunks:
    length, offset = array.length, array.offset
    buffers = _children(array.buffers or 0, 3) if array.n_buffers == 3 else []
    if (
        len(buffers) != 3
        or array.n_children
        or length < 0
        or offset < 0
        or array.dictionary
        or (length and not (buffers[1] and buffers[2]))
    ):
        return ARROW_SHAPE, 0, 0, format_, None
    validity, offsets_at, data = buffers
    if validity and array.null_count and length:
        bits = ctypes.string_at(validity, (offset + length + 7) // 8)
        for i in range(length):
            bit = offset + i
            if not bits[bit >> 3] >> (bit & 7) & 1:
                return ARROW_NULL, i, 0, format_, None
    selected = list(range(length)) if selection is None else selection
    if not selected:
        return ARROW_OK, 0, 0, format_, []
    offsets = (offset_type * (offset + length + 1)).from_address(offsets_at)[offset:]
    header = 6 if magic == 1 else 5
    cuts: list[tuple[int, int, int]] = []
    start = size = 0
    for k, i in enumerate(selected):
        if not 0 <= i < length:
            raise IndexError("a row outside the array")
        if offsets[i] < 0 or offsets[i + 1] < offsets[i]:
            return ARROW_OFFSETS, i, 0, format_, None
        n = offsets[i + 1] - offsets[i]
        if n > max_message or n > 0x7FFFFFFF - header:
            return ARROW_TOO_LARGE, i, n, format_, None
        if k - start >= max_count or (k > start and size + n > max_bytes):
            cuts.append((start, k, size))
            start, size = k, 0
        size += n
    cuts.append((start, len(selected), size))
    low, high = min(offsets[i] for i in selected), max(offsets[i + 1] for i in selected)
    block = ctypes.string_at(data + low, high - low)
    chunks = []
    for start, stop, size in cuts:
        payloads = [block[offsets[i] - low : offsets[i + 1] - low] for i in selected[start:stop]]
        chunks.append((stop - start, size, encode(payloads, magic, attributes)))
    return ARROW_OK, 0, 0, format_, chunks


_GET_SCHEMA_CALL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_GET_NEXT_CALL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_LAST_ERROR_CALL = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)


class StreamError(Exception):
    """An ``ArrowArrayStream`` failed (its errno and its last error)."""


def stream_arrays(capsule: object) -> Any:
    """The (schema capsule, array capsule) pairs of an ``"arrow_array_stream"`` capsule
    (what ``__arrow_c_stream__`` returns), one per array of the stream, for
    ``encode_arrow``: the stream is moved out of its capsule and released once read to its
    end (or when the generator is closed). Each array capsule releases its array unless a
    consumer moved it out; the schema capsule is shared. A capsule that is not a stream
    yields nothing but raises :class:`StreamError`."""
    if not _capsule_valid(capsule, STREAM_NAME):
        raise StreamError("not an arrow_array_stream capsule")
    source = ArrowArrayStream.from_address(_capsule_pointer_of(capsule, STREAM_NAME))
    if not source.release:
        raise StreamError("the stream was released")
    stream = ArrowArrayStream()
    ctypes.memmove(ctypes.addressof(stream), ctypes.addressof(source), ctypes.sizeof(stream))
    source.release = None
    address = ctypes.addressof(stream)

    def failed(errno: int) -> StreamError:
        message = (
            _LAST_ERROR_CALL(stream.get_last_error)(address) if stream.get_last_error else None
        )
        text = message.decode("utf-8", "replace") if message else "no message"
        return StreamError(f"the stream failed (errno {errno}): {text}")

    try:
        schema = ArrowSchema()
        errno = _GET_SCHEMA_CALL(stream.get_schema)(address, ctypes.addressof(schema))
        if errno:
            raise failed(errno)
        schema_capsule = _capsule(schema, SCHEMA_NAME, _destroy_schema)
        while True:
            array = ArrowArray()
            errno = _GET_NEXT_CALL(stream.get_next)(address, ctypes.addressof(array))
            if errno:
                raise failed(errno)
            if not array.release:  # the end
                return
            yield schema_capsule, _capsule(array, ARRAY_NAME, _destroy_array)
    finally:
        if stream.release:
            _RELEASE(stream.release)(address)


def read_values(
    schema_capsule: object, array_capsule: object
) -> tuple[int, int, str | None, list[Any] | None]:
    """The values of an Arrow binary or string array as Python objects, ``bytes`` for
    ``z``/``Z`` and ``str`` for ``u``/``U``: (status, index, format, values), with the
    statuses of ``encode_arrow`` (a string that is not UTF-8 is ``ARROW_SHAPE`` at its
    index). The producer reads per-message keys with it (``send_arrow(keys=...)``: each
    key goes through the partitioner, a Python call per message anyway). The array is
    moved out of its capsule and released."""
    values: list[bytes] = []

    def collect(payloads: list[bytes], magic: int, attributes: int) -> bytes:
        values.extend(payloads)
        return b""

    status, index, _, format_, chunks = encode_arrow(
        schema_capsule, array_capsule, 1, 0, 1 << 62, 1 << 62, 0x7FFFFFFF, collect
    )
    if chunks is None:
        return status, index, format_, None
    if format_ in ("u", "U"):
        texts: list[Any] = []
        for position, value in enumerate(values):
            try:
                texts.append(value.decode("utf-8"))
            except UnicodeDecodeError:
                return ARROW_SHAPE, position, format_, None
        return ARROW_OK, 0, format_, texts
    return ARROW_OK, 0, format_, list(values)


def array_length(capsule: object) -> int | None:
    """The length of the array in an ``"arrow_array"`` capsule (None: not one, or
    released), without moving it out."""
    if not _capsule_valid(capsule, ARRAY_NAME):
        return None
    array = ArrowArray.from_address(_capsule_pointer_of(capsule, ARRAY_NAME))
    return int(array.length) if array.release else None
