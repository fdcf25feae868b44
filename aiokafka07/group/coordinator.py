"""Group membership for one member: registration, rebalances, owner claims, the rebalance
listener and offset commits, all through :class:`~aiokafka07.znodes.GroupRegistry`.

Every member computes the 0.7.2 range assignment from the same ZooKeeper view
(:mod:`.assignment`), releases what it no longer owns, and claims what it now owns; a
claim another member still holds makes the attempt fail, and it is retried after
``rebalance_backoff_ms`` (a bounded number of times). What the member owns is its
:class:`~aiokafka07.group.state.Assignment`: a partition kept across a rebalance keeps its
position and its buffered records; a new one starts at the committed offset, or without
one, where :meth:`Coordinator.starting_offset` says.

**Partitions that appear later.** Just before it registers, the member reads which
partitions of its subscription are registered under ``/brokers/topics`` (for a filter: of
every topic it matches then). Only those are subject to ``auto_offset_reset``. A partition
registered after that moment (a topic created later, a topic a filter matches once it is
created, a partition or broker added to a topic) can hold only messages produced after the
member subscribed, give or take the moment between the producer's first write and the
broker's registration: without a committed offset it is read from its beginning, so
nothing produced after the subscription is lost and nothing is read twice. This includes a
partition created between the registration and the member's first rebalance. ZooKeeper
cannot tell a new broker from a returning one: the partitions of a broker that was down
when the member subscribed count as new too.

**Session expiry.** Owner nodes are ephemeral: when this member's ZooKeeper session
expires, another member may take its partitions, consume and commit. So the moment the
expiry is seen, every owned partition is *fenced* (nothing more is fetched, handed out or
committed for it; buffered records are dropped), and the next rebalance, or any rebalance
that finds this member's registration gone, starts every partition it owns, kept ones
included, from ZooKeeper's committed offset. Commits and releases are written only from the
session that claimed the partition (``session=`` fencing in :mod:`aiokafka07.zookeeper`),
so a write delayed across an expiry can never overwrite the next owner's progress or
delete its claim. Duplicates after an expiry are therefore only this member's own
uncommitted work.

A listener that raises or hangs is logged (with its traceback) and the rebalance goes on.

**Changing what the member consumes** (:meth:`Coordinator.request`). A new subscription
re-registers the member as 0.7.2 registers one: its ``/consumers/<group>/ids/<id>`` node is
deleted and created again with the new value (the other members watch the children of
``ids``, not the values, so only that makes them rebalance), then the member rebalances.
Unsubscribing revokes and releases everything and deletes the node: the member leaves the
group, its session stays open. A manual assignment (no group membership at all) makes
the member own exactly the given partitions, with no registration and no owner nodes. A
change is applied by the coordinator's task; one that fails stays pending and is applied
again when the supervisor restarts the task (the failure is raised once to the reader).

**Unusable registrations.** A child of ``/consumers/<group>/ids`` whose value is empty or
no 0.7.2 registration (a node left by hand, or by an old client that created it before
writing its value) is skipped with a warning: it stands for no thread ids, so the range
assignment is computed over the readable members only, and gives it nothing. Every
member skips it alike, so they all agree. (A Java 0.7.2 member fails its rebalance on
such a node, and keeps failing until it is deleted.)

**ZooKeeper unreachable.** A rebalance waits for the connection to come back (the lease
has stopped consumption meanwhile) and tries at once when it does; the time spent
waiting counts against the same budget as failed attempts, so a rebalance that cannot
happen is still reported.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..backoff import Backoff
from ..errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    ZooKeeperError,
)
from ..fetch_size import FetchSizer
from ..protocol import EARLIEST
from ..records import TopicPartition
from ..supervisor import CrashPolicy, Supervisor
from ..znodes import (
    BROKER_TOPICS,
    GroupRegistry,
    ids_path,
    read_brokers,
    read_topic_registrations,
    read_topics,
    registrations_from_values,
    thread_ids,
    topic_path,
)
from ..zookeeper import ZooKeeper
from .assignment import assign, group_threads, partition_names
from .fetcher import Fetchers, Offsets
from .state import Assignment, PartitionState
from .streams import Delivery, Stream
from .subscription import Subscription

__all__ = ["Coordinator", "GroupSettings", "RebalanceListener", "Target"]

log = logging.getLogger("aiokafka07.group")

#: The part of the session timeout after a confirmed request during which the member
#: still counts its partitions as its own.
LEASE_FRACTION = 2 / 3

#: How long a listener call cancelled at its timeout may take to end (at most the timeout
#: itself) before it is abandoned, in seconds.
LISTENER_GRACE = 1.0


class RebalanceListener(Protocol):
    """Told about partitions around a rebalance (both coroutines are awaited).

    ``on_partitions_revoked`` is called while the member still owns the partitions
    (before their offsets are committed and they are released); ``on_partitions_assigned``
    once the new ones are claimed and positioned, before they are fetched. After a
    ZooKeeper session expiry every owned partition is revoked, then assigned again from
    its committed offset. An exception or a call longer than the listener timeout is
    logged and the rebalance goes on; a call past its timeout is cancelled, and one that
    ignores the cancellation is abandoned (still running, logged), and cancelled again
    when the consumer closes.
    """

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...


#: What a member consumes: a group subscription, partitions assigned by hand (no group
#: membership), or nothing.
Target = Subscription | frozenset[TopicPartition] | None


@dataclass(frozen=True)
class GroupSettings:
    """The coordinator's configuration (times in seconds); ``subscription`` is the first
    one (None: none until the application subscribes or assigns)."""

    consumer_id: str
    subscription: Subscription | None
    fetch_size: int
    max_fetch_size: int
    rebalance_backoff: float
    rebalance_attempts: int
    listener_timeout: float
    auto_commit_interval: float


class Coordinator:
    """One member's part in its group (see the module docstring)."""

    def __init__(
        self,
        settings: GroupSettings,
        zookeeper: ZooKeeper,
        registry: GroupRegistry | None,
        assignment: Assignment,
        streams: Sequence[Stream],
        delivery: Delivery,
        offsets: Offsets,
        fetchers: Fetchers,
        listener: RebalanceListener | None,
        supervisor: Supervisor,
    ) -> None:
        self.settings = settings
        self.supervisor = supervisor  # runs each listener call
        self.consumer_id = settings.consumer_id
        self.zookeeper = zookeeper
        self._registry = registry  # None: no group (a manual assignment only)
        self.assignment = assignment
        self.streams = streams
        self.delivery = delivery
        self.offsets = offsets
        self.fetchers = fetchers
        self.listener = listener
        self.rebalances = 0
        self.listener_errors = 0
        self.commit_failures = 0
        self.session_expiries = 0
        self._needed = asyncio.Event()
        self._lock = asyncio.Lock()
        self._broken = False  # the session expired, or the registration was found gone
        # Owner nodes we may still hold and must delete: partition → the session that
        # claimed it (revoked, or claimed by a failed attempt).
        self._pending_release: dict[TopicPartition, int] = {}
        #: Partitions the last rebalance attempt could not claim (owned by others).
        self._contended: list[TopicPartition] = []
        self._members = 0
        # The partitions registered when the member subscribed: the only ones a missing
        # committed offset is reset for by auto_offset_reset (see the module docstring).
        self._existing: set[TopicPartition] = set()
        #: The registered subscription, or the manual assignment, in effect (at most one).
        self.subscription: Subscription | None = None
        self.manual: frozenset[TopicPartition] | None = None
        # What the application asked for last, until applied (see request()).
        self._wanted: Target = settings.subscription
        self._changing = settings.subscription is not None
        #: The cluster as last read from ZooKeeper: the children of /brokers/topics (for a
        #: filter, or topics()), and the registered partitions of each topic read.
        self.known_topics: list[str] = []
        self.topic_partitions: dict[str, set[TopicPartition]] = {}
        # Registrations skipped as unusable (member → value), each warned about once.
        self._unusable: dict[str, str | None] = {}

    @property
    def registry(self) -> GroupRegistry:
        """The group's znodes; :class:`IllegalStateError` for a consumer without a group."""
        if self._registry is None:
            raise IllegalStateError(
                f"{self.consumer_id} has no group: no subscription, committed offsets or "
                "commits (give group= for those)"
            )
        return self._registry

    @property
    def has_group(self) -> bool:
        return self._registry is not None

    @property
    def group(self) -> str:
        return self._registry.group if self._registry is not None else "(none)"

    # -- lifecycle ----------------------------------------------------------------------

    async def join(self) -> None:
        """Apply what the member consumes: register and take part in a first rebalance,
        or take a manual assignment (raises if it fails)."""
        zk = self.zookeeper
        zk.add_session_lost_listener(self.session_lost)
        zk.add_session_listener(self.session_renewed)
        await self._apply_wanted()
        if self.subscription is not None:
            await self.rebalance()

    async def run(self) -> None:
        """Apply a requested change, and rebalance whenever a watch fires or the session
        changes (supervised)."""
        while True:
            await self._needed.wait()
            self._needed.clear()
            await self._apply_wanted()
            if self.subscription is not None:
                await self.rebalance()

    def request(self, target: Target) -> None:
        """Consume ``target`` from now on: applied by :meth:`join`, or by the running task
        at once (the latest request wins)."""
        self._wanted = target
        self._changing = True
        self.trigger()

    @property
    def wanted(self) -> Target:
        """What the application asked for last (applied or not yet)."""
        return self._wanted

    async def _apply_wanted(self) -> None:
        if not self._changing:
            return
        target = self._wanted
        async with self._lock:
            if isinstance(target, Subscription):
                await self._subscribe(target)
            elif target is None:
                await self._unsubscribe()
            else:
                await self._assign_manually(target)
        if self._wanted is target:
            self._changing = False

    async def _subscribe(self, new: Subscription) -> None:
        """Register ``new`` (again: delete and create our ``ids`` node, so that every
        member rebalances); the rebalance that follows revokes what it no longer covers."""
        zk, registry = self.zookeeper, self.registry
        if self.manual is not None:  # (assign(), then unsubscribe() and subscribe() at once)
            await self._drop_manual()
        old = self.subscription
        existing = await self.registered_partitions(new)
        kept = {tp for tp in self._existing if old is not None and old.covers(tp.topic)}
        added = {tp for tp in existing if old is None or not old.covers(tp.topic)}
        if old is not None:
            await registry.unregister(self.consumer_id)
        await registry.register(self.consumer_id, new.as_registration(), session=zk.session_id)
        self._existing = kept | added
        self.subscription = new
        if old is not None:
            log.info(
                "%s re-registered in group %s with subscription %s",
                self.consumer_id,
                self.group,
                new.registration(),
            )

    async def _unsubscribe(self) -> None:
        """Give up everything: as a rebalance that revokes all (the listener is told, the
        positions are committed, the owner nodes released), then delete our ``ids`` node.
        A manual assignment is dropped (its positions committed, with a group)."""
        if self.manual is not None:
            await self._drop_manual()
        else:
            await self._leave_subscription()
        await self.fetchers.sync()

    async def _leave_subscription(self) -> None:
        if self.subscription is not None:
            states = list(self.assignment.partitions.values())
            if states:
                await self._tell("on_partitions_revoked", {s.tp for s in states})
                self._discard(states)
                for state in states:
                    self._pending_release[state.tp] = state.session
                await self._commit_quietly(states)
                self.assignment.partitions.clear()
                self.assignment.generation += 1
            await self._release_pending()
            await self.registry.unregister(self.consumer_id)
            log.info("%s unsubscribed: left group %s", self.consumer_id, self.group)
            self.subscription = None
            self._existing = set()

    async def _assign_manually(self, wanted: frozenset[TopicPartition]) -> None:
        """Own exactly ``wanted``, without the group: no registration, no owner nodes, no
        rebalance listener. A partition kept keeps its position; a new one starts at the
        group's committed offset (with a group), else at ``auto_offset_reset``."""
        zk, owned = self.zookeeper, self.assignment.partitions
        await self._leave_subscription()  # (subscribe(), then unsubscribe() and assign())
        dropped = [owned[tp] for tp in sorted(owned) if tp not in wanted]
        self.manual = wanted
        if dropped:
            self._discard(dropped)
            await self._commit_quietly(dropped)
            for state in dropped:
                del owned[state.tp]
        # Nothing is owned through the ZooKeeper session: its expiry fences nothing.
        self.delivery.renew(math.inf)
        self.assignment.brokers = await read_brokers(zk)
        added = sorted(wanted - owned.keys())
        committed: list[int | None] = [None] * len(added)
        if self.has_group:
            committed = list(
                await asyncio.gather(*(self.registry.committed(t.topic, t.name) for t in added))
            )
        starts = [
            offset if offset is not None else await self.offsets.reset(tp, None)
            for tp, offset in zip(added, committed, strict=True)
        ]
        order = {tp: i for i, tp in enumerate(sorted(wanted))}
        settings = self.settings
        for tp, start, offset in zip(added, starts, committed, strict=True):
            index = order[tp] % len(self.streams)
            owned[tp] = PartitionState(
                tp,
                f"{self.consumer_id}-{index}",
                self.streams[index],
                start,
                sizer=FetchSizer(tp.topic, tp.name, settings.fetch_size, settings.max_fetch_size),
                session=zk.session_id or 0,
                committed=offset,
            )
        if dropped or added:
            self.assignment.generation += 1
            log.info(
                "%s: assigned by hand %s, dropped %s",
                self.consumer_id,
                describe(added) or "nothing",
                describe(s.tp for s in dropped) or "nothing",
            )
        await self.fetchers.sync()

    async def _drop_manual(self) -> None:
        states = list(self.assignment.partitions.values())
        self._discard(states)
        await self._commit_quietly(states)
        self.assignment.partitions.clear()
        self.assignment.generation += 1
        self.manual = None
        self.delivery.revoke_lease()  # a subscription's rebalance renews it

    async def keep_lease(self) -> None:
        """Prove the ZooKeeper session alive every third of its timeout (supervised).

        A request sent at ``t`` and answered shows the server heard from the session at or
        after ``t``, so it cannot expire before ``t`` + the session timeout: the member's
        partitions are its own until then (two thirds of it, for safety). While the lease
        has run out (ZooKeeper unreachable, or this process was stopped), no new fetch is
        handed out or taken in: another member may be taking the partitions over.
        """
        zk = self.zookeeper
        retry = Backoff(0.05, max(0.05, zk.session_timeout / 3))
        while True:
            session = zk.session_id
            sent = time.monotonic()
            timeout = zk.session_timeout
            try:
                await zk.exists("/")
            except ZooKeeperError as exc:
                # Asked again as soon as the connection is back (a request sent on the
                # broken connection fails only then): consuming resumes at once.
                log.debug("%s: ZooKeeper did not answer: %s", self.consumer_id, exc)
                await zk.wait_connected(timeout / 3)
                await asyncio.sleep(retry.failed())
                continue
            retry.succeeded()
            if session is not None and zk.session_id == session and not self._broken:
                self.delivery.renew(sent + timeout * LEASE_FRACTION)
            await asyncio.sleep(timeout / 3)

    async def refresh_topics(self) -> list[str]:
        """Read every topic and its registered partitions from ZooKeeper (``topics()``);
        the children of ``/brokers/topics``, sorted."""
        zk = self.zookeeper
        topics = await read_topics(zk)
        found = await asyncio.gather(*(read_topic_registrations(zk, t) for t in topics))
        self.known_topics = topics
        self.topic_partitions = {
            topic: {TopicPartition.parse(topic, name) for name in partition_names(registrations)}
            for topic, registrations in zip(topics, found, strict=True)
        }
        return topics

    async def auto_commit(self) -> None:
        """Commit every ``auto_commit_interval`` seconds (supervised); a failed commit
        is logged and retried at the next interval."""
        while True:
            await asyncio.sleep(self.settings.auto_commit_interval)
            try:
                await self.commit()
            except KafkaError as exc:
                log.warning("%s: auto-commit failed: %s", self.consumer_id, exc)

    async def leave(self, commit: bool) -> None:
        """Commit (if asked) and stop owning anything. The ``ids`` registration and the
        owner nodes are not deleted here: they are ephemeral, and the session's close,
        which :meth:`Consumer.close` does next whatever happens here, deletes them all in
        one transaction, as 0.7.2's shutdown leaves (ZOOKEEPER §5.4). Deleting them one by
        one first started the rest of the group's rebalance while this member was still
        leaving, and its session's close then queued behind the others' reads and claims
        at the server, which made ``close()`` nearly three times as long. A failed commit
        is raised."""
        failure: KafkaError | None = None
        if commit:
            try:
                await self.commit()
            except KafkaError as exc:
                failure = exc
                log.error("%s: the final commit failed: %s", self.consumer_id, exc)
        self.assignment.partitions.clear()
        self._pending_release.clear()  # (ephemeral: they go with the session)
        if failure is not None:
            raise failure

    def trigger(self, _path: str = "") -> None:
        self._needed.set()

    def session_lost(self) -> None:
        """The session expired: stop acting as the owner of anything at once."""
        self.session_expiries += 1
        if self.manual is not None:
            log.warning(
                "%s: ZooKeeper session expired; a manual assignment goes on (nothing was owned "
                "through it)",
                self.consumer_id,
            )
            return
        self._broken = True
        self.delivery.revoke_lease()
        states = list(self.assignment.partitions.values())
        for state in states:
            state.fenced = True
        self._discard(states)
        if states:
            log.warning(
                "%s: ZooKeeper session expired: %d partitions fenced (nothing fetched, "
                "handed out or committed) until the next rebalance",
                self.consumer_id,
                len(states),
            )
        # The rebalance runs when the new session is there (session_renewed).

    async def session_renewed(self) -> None:
        self._broken = True
        self.trigger()

    # -- commits ------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Write ``offsets`` (each of an owned partition), or every owned partition's
        position, to ZooKeeper; only what changed. :class:`CommitFailedError` if any could
        not be written (the others were)."""
        targets: list[tuple[PartitionState, int]] = []
        if offsets is None:
            targets = [(s, s.position) for s in self.assignment.partitions.values()]
            targets = [(s, o) for s, o in targets if not s.fenced]
        else:
            for tp, offset in offsets.items():
                state = self.assignment.require(tp)
                if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                    raise ValueError(f"{tp.topic}/{tp.name}: cannot commit offset {offset!r}")
                if state.fenced:
                    raise CommitFailedError(
                        f"{tp.topic}/{tp.name}: the ZooKeeper session that owned it expired; "
                        "not committed"
                    )
                targets.append((state, offset))
        await self._write(targets)

    async def _write(self, targets: Iterable[tuple[PartitionState, int]]) -> None:
        todo = [(s, o) for s, o in targets if s.committed != o]
        if not todo:
            return
        registry = self.registry
        # A manual assignment owns nothing through the session: nothing to fence to.
        fenced = self.manual is None
        results = await asyncio.gather(
            *(
                registry.commit(s.tp.topic, s.tp.name, o, session=s.session if fenced else None)
                for s, o in todo
            ),
            return_exceptions=True,
        )
        failed: list[tuple[TopicPartition, BaseException]] = []
        for (state, offset), result in zip(todo, results, strict=True):
            if isinstance(result, BaseException):
                failed.append((state.tp, result))
                continue
            state.committed = offset
            log.debug(
                "%s: committed %s/%s at %d", self.consumer_id, state.tp.topic, state.tp.name, offset
            )
        if failed:
            self.commit_failures += 1
            (tp, first), *_ = failed
            raise CommitFailedError(
                f"{len(failed)} of {len(todo)} offsets not committed (e.g. {tp.topic}/{tp.name}:"
                f" {first})"
            ) from first

    async def _commit_quietly(self, states: Iterable[PartitionState]) -> None:
        """Commit positions as part of a rebalance: a failure is logged, not fatal (and
        without a group there is nothing to commit to)."""
        if not self.has_group:
            return
        try:
            await self._write((s, s.position) for s in states if not s.fenced)
        except CommitFailedError as exc:
            log.warning("%s: committing during a rebalance failed: %s", self.consumer_id, exc)

    # -- rebalancing --------------------------------------------------------------------

    async def rebalance(self) -> None:
        """Rebalance until an attempt succeeds; after ``rebalance_attempts`` failed ones,
        raise :class:`ZooKeeperError` (the supervisor reports it and restarts us)."""
        loop = asyncio.get_running_loop()
        backoff = Backoff(self.settings.rebalance_backoff, self.settings.rebalance_backoff)
        began = loop.time()
        budget = self.settings.rebalance_attempts * self.settings.rebalance_backoff
        attempt = 0
        while True:
            if not self.zookeeper.connected:
                await self._wait_for_zookeeper(began + budget - loop.time())
            attempt += 1
            log.debug("%s: rebalance attempt %d", self.consumer_id, attempt)
            started, session = time.monotonic(), self.zookeeper.session_id
            self._contended = []
            try:
                async with self._lock:
                    done = await self._attempt()
                reason = "partitions still owned by others"
            except (ZooKeeperError, KafkaConnectionError) as exc:
                done = False
                reason = str(exc)
                log.warning("%s: rebalance attempt %d failed: %s", self.consumer_id, attempt, exc)
            if done:
                if not self._broken and self.zookeeper.session_id == session:
                    # Its ZooKeeper answers proved the session alive since `started`.
                    timeout = self.zookeeper.session_timeout
                    self.delivery.renew(started + timeout * LEASE_FRACTION)
                self.rebalances += 1
                log.info(
                    "%s: rebalance %d of group %s done in %.0f ms (%d attempts, %d members): "
                    "owns %s",
                    self.consumer_id,
                    self.rebalances,
                    self.group,
                    (loop.time() - began) * 1000,
                    attempt,
                    self._members,
                    describe(self.assignment.partitions) or "nothing",
                )
                return
            if attempt >= self.settings.rebalance_attempts:
                raise ZooKeeperError(
                    f"{self.consumer_id}: rebalance of group {self.group} gave up after "
                    f"{attempt} attempts: {reason}"
                )
            if self._contended:
                await self._wait_for_owners(backoff.failed())
            else:
                await backoff.sleep_after_failure()

    async def _wait_for_zookeeper(self, left: float) -> None:
        """Until the session is connected again (at most ``left`` seconds: then raise)."""
        log.info("%s: waiting for ZooKeeper to rebalance", self.consumer_id)
        if not await self.zookeeper.wait_connected(max(0.0, left)):
            raise ZooKeeperError(
                f"{self.consumer_id}: rebalance of group {self.group} gave up: not connected "
                "to ZooKeeper"
            )
        log.info("%s: ZooKeeper is back: rebalancing", self.consumer_id)

    async def _attempt(self) -> bool:
        zk, registry, settings = self.zookeeper, self.registry, self.settings
        session = zk.session_id
        if session is None or not zk.connected:
            raise ZooKeeperError("not connected to ZooKeeper")
        if self._broken:
            await self._forget_all("the ZooKeeper session expired")
            self._broken = False
        subscription = self.subscription
        if subscription is None:
            return True  # (unsubscribed meanwhile: nothing to balance)
        # Each list is read once, leaving the watch whose firing starts the next rebalance.
        available = sorted(await self._watch(BROKER_TOPICS)) if subscription.is_wildcard else []
        if subscription.is_wildcard:
            self.known_topics = available
        my_topics = subscription.streams_per_topic(available)
        values = await self._watch_data(ids_path(self.group))
        members = self._readable(values)
        if self.consumer_id not in values:
            await self._forget_all("its registration was gone")
            await registry.register(
                self.consumer_id, subscription.as_registration(), session=session
            )
        members[self.consumer_id] = subscription  # (what it registered)
        self._members = len(members)
        threads = group_threads(members, available or my_topics)
        brokers = await read_brokers(zk)
        read = await asyncio.gather(*(self._watch_data(topic_path(t)) for t in my_topics))
        wanted: dict[TopicPartition, str] = {}
        for (topic, count), values in zip(my_topics.items(), read, strict=True):
            registrations = registrations_from_values(topic, values)
            names = partition_names(registrations)
            self.topic_partitions[topic] = {TopicPartition.parse(topic, n) for n in names}
            ranges = assign(names, threads.get(topic, []))
            for thread in thread_ids(self.consumer_id, count):
                for name in ranges.get(thread, []):
                    wanted[TopicPartition.parse(topic, name)] = thread
        owned = self.assignment.partitions
        revoked = {tp for tp, state in owned.items() if wanted.get(tp) != state.thread}
        added = {tp for tp, thread in wanted.items() if tp not in owned or tp in revoked}
        self.assignment.brokers = brokers

        if revoked:
            await self._tell("on_partitions_revoked", revoked)
            # Stop holding them (no more records handed out or fetch answers taken, the
            # positions freeze), commit those positions, then give up the owner nodes.
            states = [owned.pop(tp) for tp in revoked]
            self._discard(states)
            for state in states:
                self._pending_release[state.tp] = state.session
            await self._commit_quietly(states)
        await self._release_pending()
        if not await self._claim(wanted, added, session):
            return False
        if zk.session_id != session or self._broken:
            for tp in added:
                self._pending_release[tp] = session
            raise ZooKeeperError("the ZooKeeper session changed during the rebalance")
        try:
            starts = await self._starting_offsets(sorted(added))
        except BaseException:
            for tp in added:
                self._pending_release[tp] = session
            raise
        for tp, (offset, committed) in starts.items():
            thread = wanted[tp]
            stream = self.streams[int(thread.rsplit("-", 1)[1]) % len(self.streams)]
            owned[tp] = PartitionState(
                tp,
                thread,
                stream,
                offset,
                sizer=FetchSizer(tp.topic, tp.name, settings.fetch_size, settings.max_fetch_size),
                session=session,
                committed=committed,
            )
        if revoked or added:
            self.assignment.generation += 1
        # As 0.7.2: commit at every rebalance (a new partition's start, too).
        await self._commit_quietly(list(owned.values()))
        await self._tell("on_partitions_assigned", added)
        if revoked or added:
            log.info(
                "%s: assigned %s, revoked %s",
                self.consumer_id,
                describe(added) or "nothing",
                describe(revoked) or "nothing",
            )
        await self.fetchers.sync()
        return True

    def _readable(self, registrations: Mapping[str, str | None]) -> dict[str, Subscription]:
        """The subscriptions of the members whose registration is usable; the others
        are skipped (see the module docstring), with a warning the first time."""
        members: dict[str, Subscription] = {}
        unusable: dict[str, str | None] = {}
        for member, value in registrations.items():
            try:
                members[member] = Subscription.parse(value)
            except ZooKeeperError as exc:
                unusable[member] = value
                known = member in self._unusable and self._unusable[member] == value
                if member != self.consumer_id and not known:
                    log.warning(
                        "%s: skipping %s in group %s: %s; it is given no partitions (delete "
                        "the node if no member stands behind it)",
                        self.consumer_id,
                        member,
                        self.group,
                        exc,
                    )
        self._unusable = unusable
        return members

    async def _claim(
        self, wanted: Mapping[TopicPartition, str], added: set[TopicPartition], session: int
    ) -> bool:
        """Claim every wanted partition (our own nodes count as ours: they vanish with an
        expired session and must be created again). On a conflict or an error, the ones
        newly claimed are released at the next attempt."""
        order = sorted(wanted)
        results = await asyncio.gather(
            *(self.registry.claim(tp.topic, tp.name, wanted[tp], session=session) for tp in order),
            return_exceptions=True,
        )
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is None and all(results):
            return True
        for tp, result in zip(order, results, strict=True):
            if result is True and tp in added:
                self._pending_release[tp] = session
        if failure is not None:
            raise failure
        self._contended = [tp for tp, result in zip(order, results, strict=True) if not result]
        return False

    async def _wait_for_owners(self, delay: float) -> None:
        """After a rebalance attempt lost to owner nodes of other members: wait for those
        nodes to go, at most ``delay`` seconds (the backoff 0.7.2 sleeps through), so that
        the next attempt starts as soon as the last of them is released rather than after
        the whole backoff. A ZooKeeper error ends the wait early only by sleeping out the
        rest: the attempts stay spaced."""
        contended, self._contended = self._contended, []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + delay
        try:
            for tp in contended:
                left = deadline - loop.time()
                if left <= 0 or not await self.registry.wait_released(tp.topic, tp.name, left):
                    break
        except ZooKeeperError as exc:
            log.debug("%s: waiting for owners to go: %s", self.consumer_id, exc)
            await asyncio.sleep(max(0.0, deadline - loop.time()))

    async def _release_pending(self) -> None:
        pending = self._pending_release
        if not pending:
            return
        order = sorted(pending)
        results = await asyncio.gather(
            *(self.registry.release(tp.topic, tp.name, session=pending[tp]) for tp in order),
            return_exceptions=True,
        )
        failure: BaseException | None = None
        for tp, result in zip(order, results, strict=True):
            if isinstance(result, BaseException):
                failure = failure or result
            else:
                del pending[tp]
        if failure is not None:
            raise failure

    async def _starting_offsets(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, int | None]]:
        """``(where to start, the committed offset)`` of each newly owned partition: the
        committed offset, else :meth:`starting_offset`."""
        committed = await asyncio.gather(
            *(self.registry.committed(tp.topic, tp.name) for tp in partitions)
        )
        starts: dict[TopicPartition, tuple[int, int | None]] = {}
        for tp, offset in zip(partitions, committed, strict=True):
            start = offset if offset is not None else await self.starting_offset(tp)
            starts[tp] = (start, offset)
        return starts

    async def starting_offset(self, tp: TopicPartition) -> int:
        """Where a partition without a committed offset starts: ``auto_offset_reset`` for
        one registered when the member subscribed; its beginning for one registered later
        (everything in it is new to the member; see the module docstring), unless the
        policy is ``"error"``, which never chooses an offset."""
        if tp in self._existing or self.offsets.auto_offset_reset == "error":
            return await self.offsets.reset(tp, None)
        offset = await self.offsets.before(tp, EARLIEST)
        log.info(
            "%s: %s/%s appeared after this member subscribed: read from its beginning (%d)",
            self.consumer_id,
            tp.topic,
            tp.name,
            offset,
        )
        return offset

    async def registered_partitions(self, subscription: Subscription) -> set[TopicPartition]:
        """The partitions registered now (``/brokers/topics/<topic>/<broker>``) of every
        topic ``subscription`` covers (a filter: the topics it matches now)."""
        zk = self.zookeeper
        available = await read_topics(zk) if subscription.is_wildcard else []
        if subscription.is_wildcard:
            self.known_topics = available
        topics = list(subscription.streams_per_topic(available))
        found = await asyncio.gather(*(read_topic_registrations(zk, t) for t in topics))
        registered: set[TopicPartition] = set()
        for topic, registrations in zip(topics, found, strict=True):
            partitions = {TopicPartition.parse(topic, n) for n in partition_names(registrations)}
            self.topic_partitions[topic] = partitions
            registered |= partitions
        return registered

    async def _forget_all(self, why: str) -> None:
        """After a break in ownership: revoke everything without committing (the next
        owner may have moved on), so every partition starts again from ZooKeeper."""
        states = list(self.assignment.partitions.values())
        if not states:
            return
        log.warning(
            "%s: %s: %d partitions start again from their committed offsets",
            self.consumer_id,
            why,
            len(states),
        )
        await self._tell("on_partitions_revoked", {s.tp for s in states})
        for state in states:
            state.fenced = True
        self._discard(states)
        for state in states:
            self._pending_release[state.tp] = state.session
        self.assignment.partitions.clear()
        self.assignment.generation += 1

    def _discard(self, states: Sequence[PartitionState]) -> None:
        for stream in self.streams:
            stream.discard({s for s in states if s.stream is stream})

    async def _tell(self, method: str, partitions: set[TopicPartition]) -> None:
        """Call the listener in a supervised task of its own, surviving whatever it does.

        A call still running after the listener timeout is cancelled; one that has not
        ended :data:`LISTENER_GRACE` later (it swallowed the cancellation) is abandoned:
        it keeps running, owned by the supervisor, which cancels it again on close and
        waits for it only within the close's bound. Either way the rebalance goes on.
        """
        if self.listener is None or not partitions:
            return
        timeout = self.settings.listener_timeout
        call = self.supervisor.spawn(
            f"listener.{method}", self._call(method, set(partitions)), policy=CrashPolicy.LOG
        )
        try:
            done, _ = await asyncio.wait({call}, timeout=timeout)
            if done:
                return
            self.listener_errors += 1
            call.cancel()
            done, _ = await asyncio.wait({call}, timeout=min(timeout, LISTENER_GRACE))
        except asyncio.CancelledError:
            call.cancel()  # (the member is closing: its supervisor waits for the call)
            raise
        if done:
            log.error(
                "%s: the rebalance listener's %s did not return within %g s and was "
                "cancelled; the rebalance goes on without it",
                self.consumer_id,
                method,
                timeout,
            )
        else:
            log.error(
                "%s: the rebalance listener's %s did not return within %g s and ignored its "
                "cancellation: abandoned, still running (it is cancelled again when the "
                "consumer closes); the rebalance goes on without it",
                self.consumer_id,
                method,
                timeout,
            )

    async def _call(self, method: str, partitions: set[TopicPartition]) -> None:
        try:
            await getattr(self.listener, method)(partitions)
        except Exception:
            self.listener_errors += 1
            log.exception(
                "%s: the rebalance listener's %s raised; the rebalance goes on",
                self.consumer_id,
                method,
            )

    async def _watch(self, path: str) -> list[str]:
        """The children of ``path``, leaving a watch on it that triggers a rebalance."""
        self.zookeeper.add_child_watch_callback(path, self.trigger)  # (once per path)
        return await self.zookeeper.watch_children(path)

    async def _watch_data(self, path: str) -> dict[str, str | None]:
        """The children of ``path`` with their values, as :meth:`_watch`."""
        self.zookeeper.add_child_watch_callback(path, self.trigger)
        return await self.zookeeper.watch_children_data(path)


def describe(partitions: Iterable[TopicPartition]) -> str:
    """``"events [0-0 0-1], logs [1-0]"``: partitions grouped by topic, for log lines."""
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp)
    return ", ".join(f"{t} [{' '.join(tp.name for tp in tps)}]" for t, tps in by_topic.items())
