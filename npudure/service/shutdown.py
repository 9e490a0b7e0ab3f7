"""Graceful stop, shared by the agent and the scheduler.

NOT_SERVING first, then a pause (``drain_s``) so that the scheduler's health monitor and proxyless
clients' health checks move traffic elsewhere while this server still answers, then ``server.stop``
with a grace (``grace_s``): gRPC sends GOAWAY, refuses new calls and lets the calls in flight finish.
Stopping both in the same instant (the old way) left no one time to notice.
"""

from __future__ import annotations

import asyncio
import logging

import grpc
from grpc_health.v1 import health

from npudure.config import ShutdownConfig

log = logging.getLogger(__name__)


async def graceful_stop(
    server: grpc.aio.Server, health_servicer: health.aio.HealthServicer, shutdown: ShutdownConfig
) -> None:
    # Every service NOT_SERVING, and frozen there: a late health update cannot flip it back.
    await health_servicer.enter_graceful_shutdown()
    if shutdown.drain_s > 0:
        log.info("NOT_SERVING; draining for %.1fs before stopping", shutdown.drain_s)
        await asyncio.sleep(shutdown.drain_s)
    await server.stop(grace=shutdown.grace_s)
