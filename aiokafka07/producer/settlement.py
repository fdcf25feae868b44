"""Settling produces whose connection closed before they were confirmed.

A confirmed produce (:mod:`aiokafka07.confirm`) is proven appended once its partition's
log end has grown by every byte its connection wrote there. When the connection closes
first (the broker was killed, refused a request, stopped answering), the ledger hands
over what it knew of each target: the end before the connection's first confirmed
produce (``base``) and the bytes the connection wrote from there up to, and before, this
produce (:class:`~aiokafka07.errors.UnsettledClaim`). The producer keeps such requests as
:class:`Doubt` and, once the broker answers again and before it writes anything new to
it, reads each target's log end once and decides (:func:`verdict`):

* **appended** when the log grew by ``written``: every byte of the produce is in it, in
  the same sense as a confirmation (with one writer per partition, exactly these bytes;
  with others, the log grew by at least that much);
* **absent** when it grew by at most ``written_before`` *and* the view is complete: a
  connection attempt was refused since the connection closed, so the broker process
  that held it is gone (it appends nothing more from it) and the process answering now
  recovered its log from disk (everything appended, flushed or not, shows). A broker
  processes a connection's requests in order, so if any byte of this produce were in
  the log, every earlier one of the connection would be too. This holds whatever other
  writers appended, since they only add bytes;
* **no such partition** when the broker answers a fetch of the target's partition with
  WrongPartition: it has no such partition, so it appended nothing to it (it closed the
  connection on the produce: a refusal);
* **pending**, while the view is not complete (the broker lived on) and the broker was
  proven to have processed the produce: it appended it, and shows it at its next
  flush. Nothing new is written to the broker meanwhile, so the end is read again, until
  it shows the produce (appended) or until its confirmation would have given up on a
  live connection (``deadline``, ``request_timeout_ms`` after the produce): then it is
  **not shown** and fails as on a live connection, most likely dropped for its size;
* **unknown** otherwise: no base was read, or the log grew into the produce's bytes but
  not past them, or the view is not complete and the produce was not proven processed
  (the broker may hold appended bytes whose answer it never sent, or, after this client
  gave up on the connection, requests it has not read yet).

An absent produce is sent again in every mode (at most once holds: it is not in the
log); one for a partition the broker does not have is routed again once more, then
fails. An unknown one is sent again with ``on_unconfirmed="retry"`` (at least once) and
fails with :class:`~aiokafka07.errors.DeliveryUnknownError` with ``"fail"``.

This module decides; :mod:`.sender` reads the ends and acts on the verdicts.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from ..errors import KafkaConnectionError, UnsettledClaim
from .batch import Batch

__all__ = ["Doubt", "Verdict", "verdict"]


class Verdict(enum.Enum):
    """What one reading of a target's log end proves about one produce's bytes there."""

    APPENDED = "appended"
    ABSENT = "absent"
    NO_SUCH_PARTITION = "no such partition"
    PENDING = "pending"
    NOT_SHOWN = "not shown"
    UNKNOWN = "unknown"


def verdict(claim: UnsettledClaim, end: int, *, complete: bool, now: float = 0.0) -> Verdict:
    """The verdict on ``claim`` from the target's log ``end`` (the sum over its
    partitions), read on a later connection before this client wrote to it again, at
    ``now`` (``time.monotonic()``). ``complete``: the view shows every byte the old
    connection's broker appended and will append (see the module docstring)."""
    if claim.base is None:
        return Verdict.UNKNOWN
    grown = end - claim.base
    if grown >= claim.written:
        return Verdict.APPENDED
    if complete and grown <= claim.written_before:
        return Verdict.ABSENT
    if claim.processed and not complete:
        return Verdict.PENDING if now < claim.deadline else Verdict.NOT_SHOWN
    return Verdict.UNKNOWN


class Doubt:
    """One request written on a connection that closed before confirming it: its
    batches, the ledger's claims for the targets not confirmed (batches of its other
    targets were), the error that closed it, and whether the view became complete
    since (:attr:`complete`: a connection attempt to its broker was refused). ``alone``:
    the broker closed the connection on this request while it went alone (a refusal
    of it, unless the broker died)."""

    __slots__ = ("alone", "batches", "claims", "complete", "error")

    def __init__(
        self,
        batches: list[Batch],
        claims: tuple[UnsettledClaim, ...],
        error: KafkaConnectionError,
        *,
        alone: bool = False,
    ) -> None:
        self.batches = batches
        self.claims = claims
        self.error = error
        self.alone = alone
        self.complete = False

    def __repr__(self) -> str:
        return f"<Doubt {len(self.batches)} batches, {len(self.claims)} claims: {self.error}>"

    def targets(self) -> set[tuple[str, range]]:
        """The (topic, partitions) whose ends decide it (read for a claim without a base
        too: a partition the broker does not have decides it all the same)."""
        return {(c.topic, c.partitions) for c in self.claims}

    def decide(
        self, ends: dict[tuple[str, range], int | None], now: float
    ) -> Iterable[tuple[Batch, Verdict]]:
        """Each batch with its verdict, from ``ends`` (a reading of every target of
        :meth:`targets`: its log end, or None if the broker has no such partition) at
        ``now`` (``time.monotonic()``). A batch whose target has no claim was
        confirmed."""
        verdicts: dict[tuple[str, int], Verdict] = {}
        for claim in self.claims:
            key = (claim.topic, claim.partitions)
            if key not in ends:
                found = Verdict.UNKNOWN  # not read
            else:
                end = ends[key]
                found = (
                    Verdict.NO_SUCH_PARTITION
                    if end is None
                    else verdict(claim, end, complete=self.complete, now=now)
                )
            verdicts[(claim.topic, claim.partition)] = found
        for batch in self.batches:
            yield batch, verdicts.get((batch.topic, batch.partition), Verdict.APPENDED)
