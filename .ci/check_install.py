"""Checks an installed aiokafka07 (a built wheel or sdist, not the checkout): which
implementation of each accelerated hot path loaded, and that it works.

    python .ci/check_install.py c        # a wheel: both C accelerators must have loaded
    python .ci/check_install.py python   # no compiler at install time: the pure twins

Run from outside the checkout (its ``aiokafka07`` directory would be imported instead of
the installed one; the script refuses that). Logging is configured at DEBUG before the
import, so the line saying which implementation runs, and why, reaches stderr. cibuildwheel
runs it on every wheel it builds (``test-command`` in ``pyproject.toml``), and
``tests/test_release.py`` on a wheel and on an sdist installed without a compiler.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path


def main(expected: str) -> int:
    logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s: %(message)s")
    import aiokafka07
    from aiokafka07.producer import BatchBuilder
    from aiokafka07.producer import batch as producer_batch
    from aiokafka07.protocol import decode_message_set, encode_message_set, implementation

    checkout = Path(__file__).resolve().parent.parent
    where = Path(aiokafka07.__file__).resolve()
    if where.is_relative_to(checkout):
        print(f"imported the checkout's aiokafka07 ({where}), not an installed one")
        return 2
    found = {"codec": implementation(), "producer": producer_batch.implementation()}
    print(f"aiokafka07 {aiokafka07.__version__} from {where.parent}: {found}")
    if set(found.values()) != {expected}:
        print(f"expected {expected!r} for both")
        return 1
    # A round trip through the loaded implementation: a compressed message set (the
    # codec's encoder, scanner and decoder), and a batch built as send_batch() takes one.
    values = [b"first", b"", b"third" * 100]
    for compression in ("none", "gzip", "snappy"):
        encoded = encode_message_set(values, compression=compression)
        decoded = decode_message_set(encoded)
        if [m.value for m in decoded.messages] != values or decoded.valid_bytes != len(encoded):
            print(f"{compression} round trip gave {decoded}")
            return 1
    batch = BatchBuilder(max_count=2, max_bytes=1000, max_message_size=1000, serializer=None)
    appended = [batch.append(v) for v in values]
    if appended != [0, 1, None] or batch.values != values[:2] or batch.size() != 5:
        print(f"the batch took {appended}: {batch.values}, {batch.size()} bytes")
        return 1
    print("round trips: ok")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] not in (["c"], ["python"]):
        sys.exit(f"usage: python {sys.argv[0]} c|python")
    sys.exit(main(sys.argv[1]))
