"""A consumer group's znodes, read and written exactly as 0.7.2 does (ZOOKEEPER §1, §3, §4).

::

    /consumers/<group>/ids/<consumer id>             ephemeral  registration (§3.2)
    /consumers/<group>/owners/<topic>/<b-p>           ephemeral  owning thread id
    /consumers/<group>/offsets/<topic>/<b-p>          persistent next offset, decimal

Parents are persistent with null data. Owner nodes are claimed "expecting conflict": a
node holding our own thread id is ours (a connection blip), another value means the
previous owner has not released yet. The registry holds no state of its own; the
rebalance logic and the tools build on it.
"""

from __future__ import annotations

import logging

from ..cluster import read_topic_registrations
from ..errors import ZNodeConflictError, ZooKeeperError
from ..zookeeper import ZooKeeper
from .subscription import Subscription

__all__ = ["GroupRegistry"]

log = logging.getLogger("aiokafka07.group")


class GroupRegistry:
    """The znodes of one consumer group, over a shared :class:`ZooKeeper` session."""

    def __init__(self, zookeeper: ZooKeeper, group: str) -> None:
        if not group or "/" in group:
            raise ValueError(f"invalid consumer group name {group!r}")
        self.zookeeper = zookeeper
        self.group = group
        self.root = f"/consumers/{group}"

    # -- membership ---------------------------------------------------------------------

    async def register(self, consumer_id: str, subscription: Subscription) -> None:
        """Create this member's ephemeral ``ids`` node (again, after a session expiry)."""
        await self.zookeeper.create_ephemeral(
            f"{self.root}/ids/{consumer_id}", subscription.registration()
        )

    async def unregister(self, consumer_id: str) -> None:
        await self.zookeeper.delete(f"{self.root}/ids/{consumer_id}")

    async def members(self) -> dict[str, Subscription]:
        """Every member's subscription, in any 0.7.2 form. A member whose node vanished
        while reading is left out; an unreadable registration raises ZooKeeperError."""
        members: dict[str, Subscription] = {}
        for consumer in sorted(await self.zookeeper.get_children(f"{self.root}/ids")):
            try:
                value = await self.zookeeper.get_data(f"{self.root}/ids/{consumer}")
            except ZooKeeperError:
                if await self.zookeeper.exists(f"{self.root}/ids/{consumer}"):
                    raise
                continue  # left the group meanwhile
            members[consumer] = Subscription.parse(value)
        return members

    # -- topics ------------------------------------------------------------------------

    async def topics(self) -> list[str]:
        """The children of ``/brokers/topics`` (what wildcard subscriptions expand against)."""
        return sorted(await self.zookeeper.get_children("/brokers/topics"))

    async def topic_registrations(self, topic: str) -> dict[int, int]:
        """Broker id → partition count from ``/brokers/topics/<topic>``; entries that are
        not numbers are skipped with a warning, as they cannot be assigned."""
        return await read_topic_registrations(self.zookeeper, topic)

    # -- ownership -------------------------------------------------------------------------

    def _owner_path(self, topic: str, partition: str) -> str:
        return f"{self.root}/owners/{topic}/{partition}"

    async def claim(self, topic: str, partition: str, thread_id: str) -> bool:
        """Own ``partition`` ("b-p") for ``thread_id``; False while someone else owns it."""
        try:
            await self.zookeeper.create_ephemeral(self._owner_path(topic, partition), thread_id)
        except ZNodeConflictError as exc:
            log.info("%s/%s still owned by %s", topic, partition, exc.existing)
            return False
        return True

    async def release(self, topic: str, partition: str) -> None:
        """Give up ownership (a missing node is fine, as in 0.7.2)."""
        await self.zookeeper.delete(self._owner_path(topic, partition))

    async def owner(self, topic: str, partition: str) -> str | None:
        """The thread id owning ``partition``, or None."""
        path = self._owner_path(topic, partition)
        if not await self.zookeeper.exists(path):
            return None
        try:
            return await self.zookeeper.get_data(path)
        except ZooKeeperError:
            return None  # released while we read

    # -- offsets ----------------------------------------------------------------------------

    def _offset_path(self, topic: str, partition: str) -> str:
        return f"{self.root}/offsets/{topic}/{partition}"

    async def committed(self, topic: str, partition: str) -> int | None:
        """The committed next offset of ``partition``, or None when none was committed."""
        path = self._offset_path(topic, partition)
        if not await self.zookeeper.exists(path):
            return None
        value = await self.zookeeper.get_data(path)
        try:
            return int(value or "")
        except ValueError:
            raise ZooKeeperError(f"{path} holds {value!r}, not an offset") from None

    async def commit(self, topic: str, partition: str, offset: int) -> None:
        """Write the next offset to fetch, in decimal (0.7.2's "update persistent")."""
        if offset < 0:
            raise ValueError(f"cannot commit the negative offset {offset}")
        await self.zookeeper.write_persistent(self._offset_path(topic, partition), str(offset))

    async def offsets(self, topic: str) -> dict[str, int]:
        """Every committed offset of ``topic`` by "b-p"."""
        result: dict[str, int] = {}
        for partition in await self.zookeeper.get_children(f"{self.root}/offsets/{topic}"):
            offset = await self.committed(topic, partition)
            if offset is not None:
                result[partition] = offset
        return result

    async def offset_topics(self) -> list[str]:
        """Topics the group has committed offsets for."""
        return sorted(await self.zookeeper.get_children(f"{self.root}/offsets"))

    @staticmethod
    async def groups(zookeeper: ZooKeeper) -> list[str]:
        """Every consumer group known to ZooKeeper."""
        return sorted(await zookeeper.get_children("/consumers"))
