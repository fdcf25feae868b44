"""``aiokafka07 dump-log``: decode and check Kafka 0.7 log segment files.

0.7.2's DumpLogSegments, made a checker: for every top-level entry of each segment
(``<20-digit base offset>.kafka``) its offset, size, magic, codec and whether its CRC
matches, optionally its payload, and with ``--deep`` the messages inside compressed sets
(their offsets follow the 0.7.2 rule: the set's start, the last one its end; the text
shows them as ``<set offset>+<n>``). Each segment ends with a summary: messages, bytes,
valid bytes (the leading run of complete, intact entries: what a broker keeps when it
recovers the segment), bad CRCs, other bad entries, and a trailing partial entry (a
torn write). Corruption is reported, never fatal: a bad CRC or magic skips that entry,
an impossible size ends the segment (nothing after it can be framed).

PATHs are segment files, partition directories (``<topic>-<partition>``) or a whole
``log.dir``. Files are read sequentially in bounded memory. ``--json`` prints JSON lines:
one object per message (``"type": "message"``), problem (``"error"``), segment
(``"segment"``) and a final ``"summary"``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import ProtocolError
from ..protocol import Compression, crc32, decode_message_set
from .common import describe_exit_status

#: A declared entry size beyond this is taken for corruption (0.7 messages are bounded by
#: max.message.size, 1 MB by default): the file is not read into memory for it.
MAX_ENTRY_SIZE = 64 << 20

SUFFIX = ".kafka"

Emit = Callable[[dict[str, Any]], None]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Decode 0.7 log segments: each message's offset, size, magic, codec and CRC check, "
        "and a summary of valid, bad and partial data per segment."
    )
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="segment file, partition directory or log.dir"
    )
    parser.add_argument("--payloads", action="store_true", help="show payloads too")
    parser.add_argument(
        "--deep", action="store_true", help="list the messages inside compressed sets"
    )
    parser.add_argument("--json", action="store_true", help="print JSON lines")
    parser.add_argument(
        "--summary-only", action="store_true", help="print only the per-segment summaries"
    )
    describe_exit_status(
        parser,
        {0: "every file was read; corruption found is in the report, not the status"},
    )


@dataclass
class Summary:
    """Counts for one segment, or all of them."""

    messages: int = 0
    inner_messages: int = 0
    bytes: int = 0
    valid_bytes: int = 0
    bad_crcs: int = 0
    bad_entries: int = 0
    trailing_partial_bytes: int = 0
    undecoded_bytes: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, other: Summary) -> None:
        for name in (
            "messages", "inner_messages", "bytes", "valid_bytes", "bad_crcs", "bad_entries",
            "trailing_partial_bytes", "undecoded_bytes",
        ):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.problems += other.problems

    def text(self) -> str:
        parts = [f"{self.messages} messages"]
        if self.inner_messages:
            parts.append(f"{self.inner_messages} inside compressed sets")
        parts += [
            f"{self.bytes} bytes",
            f"{self.valid_bytes} valid bytes",
            f"{self.bad_crcs} bad CRCs",
            f"{self.bad_entries} other bad entries",
            f"{self.trailing_partial_bytes} trailing partial bytes",
        ]
        if self.undecoded_bytes:
            parts.append(f"{self.undecoded_bytes} bytes not decodable")
        return ", ".join(parts)


def segment_files(path: Path) -> list[Path]:
    """The segments under ``path``: itself, a partition directory's, or every partition
    directory's of a log dir; in log order."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no such file or directory: {str(path)!r}")
    own = sorted(p for p in path.iterdir() if p.name.endswith(SUFFIX) and p.is_file())
    if own:
        return own  # 20-digit names: the lexical order is the offset order
    found: list[Path] = []
    for directory in sorted(p for p in path.iterdir() if p.is_dir()):
        found += sorted(p for p in directory.iterdir() if p.name.endswith(SUFFIX) and p.is_file())
    return found


def base_offset(path: Path) -> int:
    stem = path.name[: -len(SUFFIX)] if path.name.endswith(SUFFIX) else path.name
    return int(stem) if stem.isascii() and stem.isdigit() else 0


def _codec_name(attributes: int) -> str:
    codec = attributes & 3
    return Compression(codec).name.lower() if codec != 3 else "unknown(3)"


def _payload(value: bytes) -> dict[str, Any]:
    try:
        return {"payload": value.decode("utf-8"), "encoding": "utf-8"}
    except UnicodeDecodeError:
        return {"payload": base64.b64encode(value).decode("ascii"), "encoding": "base64"}


def scan(file: IO[bytes], size: int, base: int, deep: bool, payloads: bool, emit: Emit) -> Summary:
    """Walk a segment's entries, emitting one dict per message or problem."""
    summary = Summary(bytes=size)
    pos = 0
    intact = True  # all entries so far were complete and valid
    while pos < size:
        offset = base + pos
        head = file.read(4)
        length = int.from_bytes(head, "big", signed=True) if len(head) == 4 else None
        if length is None or (5 <= length <= MAX_ENTRY_SIZE and length > size - pos - 4):
            what = "its size is cut off" if length is None else f"declares {length} bytes"
            summary.trailing_partial_bytes = size - pos
            _problem(summary, emit, offset, f"trailing partial entry: {what}, "
                     f"{size - pos} bytes present")  # fmt: skip
            break
        if not 5 <= length <= MAX_ENTRY_SIZE:
            summary.bad_entries += 1
            summary.undecoded_bytes = size - pos
            _problem(summary, emit, offset, f"impossible entry size {length}: the "
                     f"{size - pos} bytes from here cannot be decoded")  # fmt: skip
            break
        body = file.read(length)
        pos += 4 + length
        magic = body[0]
        if magic not in (0, 1):
            summary.bad_entries += 1
            intact = False
            _problem(summary, emit, offset, f"unknown magic byte {magic}")
            continue
        header = 6 if magic == 1 else 5
        if length < header:
            summary.bad_entries += 1
            intact = False
            _problem(summary, emit, offset, f"entry of {length} bytes is shorter than its header")
            continue
        attributes = body[1] if magic == 1 else 0
        stored = int.from_bytes(body[header - 4 : header], "big")
        value = body[header:]
        crc_ok = crc32(value) == stored
        summary.messages += 1
        if not crc_ok:
            summary.bad_crcs += 1
            intact = False
        if intact:
            summary.valid_bytes = pos
        entry: dict[str, Any] = {
            "type": "message",
            "offset": offset,
            "next_offset": base + pos,
            "size": length,
            "payload_size": len(value),
            "magic": magic,
            "attributes": attributes,
            "codec": _codec_name(attributes),
            "crc": stored,
            "crc_ok": crc_ok,
        }
        if payloads:
            entry.update(_payload(value))
        emit(entry)
        if deep and crc_ok and attributes & 3:
            _expand(head + body, offset, payloads, summary, emit)
    return summary


def _expand(entry: bytes, offset: int, payloads: bool, summary: Summary, emit: Emit) -> None:
    """The messages inside a compressed set, with 0.7.2 offsets (via the codec)."""
    try:
        messages = decode_message_set(entry, offset).messages
        error = None
    except ProtocolError as exc:
        messages = list(exc.decoded.messages) if exc.decoded is not None else []
        error = exc
    for index, message in enumerate(messages, 1):
        inner: dict[str, Any] = {
            "type": "message",
            "wrapper": offset,
            "index": index,
            "offset": message.offset,
            "size": len(message.value) + (6 if message.magic == 1 else 5),
            "payload_size": len(message.value),
            "magic": message.magic,
            "attributes": message.attributes,
            "codec": _codec_name(message.attributes),
            "crc": crc32(message.value),
            "crc_ok": True,  # the codec refuses a bad one (error below)
        }
        if payloads:
            inner.update(_payload(message.value))
        emit(inner)
    summary.inner_messages += len(messages)
    if error is not None:
        summary.bad_entries += 1
        _problem(summary, emit, offset, f"compressed set: {error}")


def _problem(summary: Summary, emit: Emit, offset: int, text: str) -> None:
    summary.problems.append(f"offset {offset}: {text}")
    emit({"type": "error", "offset": offset, "error": text})


# -- output ----------------------------------------------------------------------------------

_HEADER = f"{'OFFSET':>14}  {'SIZE':>8}  MAGIC  {'CODEC':<10}  {'CRC':<10}  VALID"


def _printable(value: str) -> str:
    return value.encode("unicode_escape").decode("ascii") if not value.isprintable() else value


def _text_row(item: dict[str, Any]) -> str:
    if item["type"] == "error":
        return f"{item['offset']:>14}  error: {item['error']}"
    offset = item["offset"] if "wrapper" not in item else f"{item['wrapper']}+{item['index']}"
    row = (
        f"{offset:>14}  {item['size']:>8}  {item['magic']:>5}  {item['codec']:<10}  "
        f"{item['crc']:#010x}  {'ok' if item['crc_ok'] else 'BAD'}"
    )
    if "payload" in item:
        if item["codec"] != "none" and "wrapper" not in item:
            shown = f"<{item['codec']} set of {item['payload_size']} bytes>"
        elif item["encoding"] == "utf-8":
            shown = _printable(item["payload"])
        else:
            shown = f"base64:{item['payload']}"
        row += f"  {shown}"
    return row


def _emitter(out: IO[str], path: Path, args: argparse.Namespace) -> Emit:
    """Writes one message or problem of ``path`` (only problems with --summary-only)."""

    def emit(item: dict[str, Any]) -> None:
        if args.summary_only and item["type"] != "error":
            return
        if args.json:
            out.write(json.dumps({**item, "file": str(path)}, ensure_ascii=False) + "\n")
        else:
            out.write(_text_row(item) + "\n")

    return emit


def _segments(paths: list[str]) -> Iterator[Path]:
    for name in paths:
        files = segment_files(Path(name))
        if not files:
            print(f"aiokafka07 dump-log: warning: no {SUFFIX} files in {name}", file=sys.stderr)
        yield from files


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    total = Summary()
    segments = 0
    previous: tuple[Path, int] | None = None  # last segment and where it ended
    for path in _segments(args.paths):
        segments += 1
        base = base_offset(path)
        if not args.json:
            print(f"{path}: base offset {base}")
            if not args.summary_only:
                print(_HEADER + ("  PAYLOAD" if args.payloads else ""))
        emit = _emitter(out, path, args)
        with open(path, "rb", buffering=1 << 20) as file:
            size = os.fstat(file.fileno()).st_size
            summary = scan(file, size, base, args.deep, args.payloads, emit)
        if previous is not None and previous[0].parent == path.parent and previous[1] != base:
            text = f"does not follow {previous[0].name}, which ends at offset {previous[1]}"
            summary.problems.append(text)
            emit({"type": "error", "offset": base, "error": text})
        previous = (path, base + size)
        total.add(summary)
        if args.json:
            record = {"type": "segment", "file": str(path), "base_offset": base, **asdict(summary)}
            out.write(json.dumps(record) + "\n")
        else:
            print(f"  {summary.text()}\n")
    if args.json:
        out.write(json.dumps({"type": "summary", "segments": segments, **asdict(total)}) + "\n")
    else:
        print(f"total: {segments} segments, {total.text()}")
    out.flush()
    return 0
