"""The bridge in a process of its own, for tests that SIGKILL it.

``python tests/bridge_process.py [--keyless] <zookeeper> <bootstrap> <topic>...`` bridges
the topics (keys: the bytes before the first ``:``, none with ``--keyless``) with small
transactions, printing
``batch <messages so far>`` after each committed one, flushed at once.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from aiokafka07.bridge import Bridge, BridgeMetrics, key_before


async def main(zookeeper: str, bootstrap: str, topics: list[str], *, keyed: bool) -> None:
    bridge = Bridge(
        zookeeper,
        bootstrap,
        topics,
        name="test",
        key=key_before(b":") if keyed else None,
        batch_size=500,
        linger_ms=20,
        # The mock cluster's control batches fail aiokafka's CRC check.
        consumer_options={"check_crcs": False},
    )

    def note(metrics: BridgeMetrics) -> None:
        sys.stdout.write(f"batch {metrics.messages} {metrics.skipped}\n")
        sys.stdout.flush()

    await bridge.run(on_batch=note)


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="bridge %(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("aiokafka07.bridge").setLevel(logging.DEBUG)
    argv = sys.argv[1:]
    keyless = argv[:1] == ["--keyless"]
    argv = argv[1:] if keyless else argv
    asyncio.run(main(argv[0], argv[1], argv[2:], keyed=not keyless))
