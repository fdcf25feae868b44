"""Shared test set-up: hypothesis profiles and a fixture running tests on both codec
implementations (the C accelerator and its pure-Python twin)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType

import pytest
from hypothesis import HealthCheck, settings

from aiokafka07.protocol import _accel, _pure
from aiokafka07.testing import KafkaCluster

settings.register_profile(
    "default",
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "thorough",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def _implementations() -> list[ModuleType]:
    impls = [_pure]
    try:
        from aiokafka07.protocol import _speedups  # type: ignore[attr-defined]
    except ImportError:
        # CI builds the accelerator; without a compiler only the pure codec exists.
        return impls
    return [_speedups, *impls]


IMPLEMENTATIONS = _implementations()


@pytest.fixture(params=IMPLEMENTATIONS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def impl(request: pytest.FixtureRequest) -> Iterator[ModuleType]:
    """Run the test with the given codec implementation active."""
    saved = _accel.impl
    _accel.impl = request.param
    try:
        yield request.param
    finally:
        _accel.impl = saved


@pytest.fixture
async def cluster(kafka_cluster: Callable[..., KafkaCluster]) -> AsyncIterator[KafkaCluster]:
    """One standalone broker (no ZooKeeper) with two partitions per topic."""
    async with kafka_cluster(1, zookeeper=None, num_partitions=2) as running:
        yield running
