"""The agent's gRPC services: Inference (the data path), Node (status/admin), health and reflection."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Sequence
from typing import NoReturn

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from npudure import __version__
from npudure.affinity import cores
from npudure.agent import cpucap, models, replies
from npudure.agent.cpu_account import CpuAccount, now_ns
from npudure.agent.decode_pool import DecodePool
from npudure.agent.load_report import ORCA_TRAILER, LoadMeter, ServingState
from npudure.agent.metrics import AgentMetrics
from npudure.agent.pool import Outcome, PoolFull, WorkerPool
from npudure.backends import Backend, BackendError, contexts
from npudure.board import soc, telemetry
from npudure.config import AgentConfig
from npudure.proto import contract, wire
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure.security import admin_inputs
from npudure.security.revocation import RevocationCheck, Revocations
from npudure.service import grpc_limits
from npudure.service.lifecycle import Lifecycle
from npudure.service.runtime import SERVER_OPTIONS
from npudure.vision import frames

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    contract.INFERENCE,
    contract.NODE,
    health.SERVICE_NAME,
    reflection.SERVICE_NAME,
)


# Proxyless clients ping every second to notice a cut link (npudure.client.proxyless): without these
# the server would answer frequent pings with GOAWAY "too_many_pings" (grpc_limits: 500 ms allowed).
KEEPALIVE = grpc_limits.KEEPALIVE_ENFORCEMENT


def _us(seconds: float) -> int:
    return max(0, round(seconds * 1e6))


def boot_id_for(backend: Backend) -> str:
    """The kernel's boot id; an emulated board gets one per agent process (its restart is its reboot)."""
    if backend.emulated:
        return f"emulated-{uuid.uuid4()}"
    return telemetry.read_boot_id() or "absent"


def _emulation_totals(backends: list[Backend]) -> tuple[float, float] | None:
    """The sim's modelled and actual seconds summed over the board's models (None: nothing emulated)."""
    totals = [t for t in (b.emulation_totals() for b in backends) if t is not None]
    if not totals:
        return None
    return sum(t[0] for t in totals), sum(t[1] for t in totals)


class Agent(rpc.NodeServicer):
    """The board's services. Inference is served by :meth:`inference_handler` (a generic handler that
    parses the request itself), so the Agent is no ``InferenceServicer``; Node is registered as one.

    ``backend`` is one backend (the board's single model, served as the config's default name) or the
    loaded models, the default first (npudure.agent.models). ``self.backend`` and ``self.pool`` are the
    default model's."""

    def __init__(
        self,
        config: AgentConfig,
        backend: Backend | Sequence[models.LoadedModel],
        split: cores.CoreSplit | None = None,
        board_soc: soc.Soc | None = None,
        contexts_source: str | None = None,
    ) -> None:
        self.config = config
        self.soc = board_soc or soc.detect(config.affinity.sysfs_root)
        if isinstance(backend, Backend):
            # Where the context count came from, for `npudure status` ("RK3576 default, measured", ...).
            source = contexts_source or contexts.resolve(config, self.soc).source
            loaded = [models.LoadedModel(models.entries(config)[0].name, backend, source)]
        else:
            loaded = list(backend)
        self.backend = loaded[0].backend
        backends = [m.backend for m in loaded]
        self.cpu = CpuAccount()
        self.metrics = AgentMetrics(
            functools.partial(_emulation_totals, backends), config.affinity.sysfs_root, self.backend, self.cpu
        )
        self.health = health.aio.HealthServicer()
        self.admin = security.AdminGuard(config.admin, config.tls)
        self.metrics.watch_admin(self.admin)
        split = split or cores.detect(config.affinity.sysfs_root)
        self.contexts_source = loaded[0].contexts_source
        self.cpu_cap = cpucap.choose(self.backend, config.affinity.sysfs_root)
        big = split.big if (config.affinity.pin_workers_to_big and not split.uniform) else ()
        pin = (lambda: cores.pin_current_thread(big)) if big else None
        # One pool per model: a model's frames wait only for its own contexts.
        self.models = {
            m.name: models.ServedModel(
                m.name, m.backend, WorkerPool(m.backend.contexts, config.queue_limit, pin), m.contexts_source
            )
            for m in loaded
        }
        self.default_model = loaded[0].name
        self.pool = self.models[self.default_model].pool
        self.metrics.watch_models(self._model_loads)
        self.boot_id = boot_id_for(self.backend)
        self.started = time.monotonic()
        self.served = 0
        self.errors = 0
        self.load = LoadMeter(self.contexts_total)
        # One JPEG decoder thread per NPU core, as before contexts were apart from cores (docs/board-cpu.md
        # measured that split); 8 contexts would otherwise mean 8 decoders on the board's CPU.
        self.decoder = DecodePool(config.npu_cores, config.queue_limit)
        self.serving = ServingState()

    @property
    def contexts_total(self) -> int:
        return sum(m.pool.size for m in self.models.values())

    # ------------------------------------------------------------------ data path
    async def infer_bytes(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        """Parse here, not in gRPC: bytes that are not an InferRequest are the caller's fault
        (INVALID_ARGUMENT), never an UNKNOWN that the scheduler would count against this board.
        The frame stays a view of ``request`` (npudure.proto.wire): no copy until the NPU input.
        The reply leaves serialized (``Infer``), so its CPU is one span: no response serializer."""
        start = now_ns()
        try:
            parsed = wire.parse(request)
        except DecodeError as exc:
            await self._fail(
                context, grpc.StatusCode.INVALID_ARGUMENT, f"the request is not an InferRequest: {exc}"
            )
        self.cpu.add("parse", "loop", now_ns() - start)
        return await self.Infer(parsed, context)

    def inference_handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            SERVICE_NAMES[0],
            {"Infer": grpc.unary_unary_rpc_method_handler(self.infer_bytes)},
        )

    async def Infer(
        self, request: pb.InferRequest | wire.Request, context: grpc.aio.ServicerContext
    ) -> bytes:
        """One frame, answered with the serialized InferResponse: its build, bookkeeping and
        serialization are the ``reply`` stage, timed here and nowhere else."""
        received = time.perf_counter()
        try:
            served = models.choose(self.models, self.default_model, request.model, self.config.node_name)
        except models.UnknownModel as exc:
            await self._fail(context, grpc.StatusCode.NOT_FOUND, str(exc))
        backend, pool = served.backend, served.pool
        job = replies.FrameJob(
            request.encoding, request.frame, backend.input_size, request.width, request.height
        )
        try:
            start = now_ns()
            job.check()
            self.cpu.add("check", "loop", now_ns() - start)
            # Decoded first, on the decoder's own threads: a costly JPEG never holds an NPU context.
            image, decode_s = await self.decoder.run(request.encoding, job.decode_to_input, job.on_loop)
            self.metrics.queue_depth.set(self._waiting() + 1)
            outcome = await pool.run(image)
        except frames.FrameError as exc:
            await self._fail(context, exc.code, str(exc))
        except PoolFull as exc:
            await self._fail(context, grpc.StatusCode.RESOURCE_EXHAUSTED, f"board is full: {exc}")
        except Exception as exc:  # a backend failure must not take the server down
            log.exception("inference failed")
            await self._fail(context, grpc.StatusCode.INTERNAL, f"inference failed on the board: {exc}")
        finally:
            self.metrics.queue_depth.set(self._waiting())
        reply_start = now_ns()
        result = outcome.result
        total = time.perf_counter() - received
        timing = pb.StageTiming(
            board_queue_us=_us(outcome.queue_s),
            decode_us=_us(decode_s),
            preprocess_us=_us(result.preprocess_s),
            npu_input_us=_us(result.npu_input_s),
            inference_us=_us(result.inference_s),
            postprocess_us=_us(result.postprocess_s),
            board_total_us=_us(total),
        )
        for stage, seconds in (
            ("board_queue", outcome.queue_s),
            ("decode", decode_s),
            ("preprocess", result.preprocess_s),
            ("npu_input", result.npu_input_s),
            ("inference", result.inference_s),
            ("postprocess", result.postprocess_s),
            ("board_total", total),
        ):
            self.metrics.stage(stage).observe(seconds)
        self.served += 1
        served.served += 1
        self.metrics.requests.labels("OK").inc()
        busy = decode_s + result.preprocess_s + result.inference_s + result.postprocess_s
        self.load.record(busy)
        context.set_trailing_metadata(((ORCA_TRAILER, self.load.report()),))
        dets = result.detections
        data = pb.InferResponse(
            request_id=request.request_id,
            node=self.config.node_name,
            backend=backend.name,
            emulated=backend.emulated,
            timing=timing,
            attempts=1,
            detections=job.detections(dets, backend.class_names),
            model=served.name,
        ).SerializeToString()
        self._account(job, outcome, now_ns() - reply_start)
        return data

    def _model_loads(self) -> list[tuple[str, bool, int, int, int, int]]:
        return [
            (m.name, m.name == self.default_model, m.pool.size, m.pool.busy, m.pool.waiting, m.served)
            for m in self.models.values()
        ]

    def _hung(self, after_s: float) -> int:
        return sum(m.pool.hung(after_s) for m in self.models.values())

    def _waiting(self) -> int:
        return sum(m.pool.waiting for m in self.models.values())

    def _account(self, job: replies.FrameJob, outcome: Outcome, reply_ns: int) -> None:
        """One OK frame's CPU by stage: raw frames of the model's size are viewed on the loop, the rest
        decoded on a worker."""
        decoded_on = "loop" if job.on_loop else "worker"
        for stage, ns in job.cpu_ns.items():
            self.cpu.add(stage, decoded_on, ns)
        self.cpu.add_worker(outcome.cpu_ns)
        self.cpu.add("reply", "loop", reply_ns)
        self.cpu.frames += 1

    async def _fail(self, context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
        """Count the failure and end the call with CODE: ``abort`` raises, so this never returns."""
        self.errors += 1
        self.metrics.requests.labels(code.name).inc()
        await context.abort(code, message)
        raise AssertionError("context.abort returned")  # it raises; this tells the type checker so

    # ------------------------------------------------------------------ admin
    def status(self) -> pb.NodeStatus:
        rps, utilization = self.load.snapshot()
        model_s, actual_s = _emulation_totals([m.backend for m in self.models.values()]) or (0.0, 0.0)
        return pb.NodeStatus(
            node=self.config.node_name,
            backend=self.backend.name,
            emulated=self.backend.emulated,
            agent_version=__version__,
            runtime_version=self.backend.runtime_version,
            model_sha256=self.backend.model_sha256,
            boot_id=self.boot_id,
            npu_cores=self.config.npu_cores,
            contexts=self.pool.size,
            contexts_source=self.contexts_source,
            in_flight=self.pool.busy,
            queue_depth=self.pool.waiting,
            served_total=self.served,
            errors_total=self.errors,
            cpu_cap_mhz=self.cpu_cap.mhz or 0,
            cpu_cap_note=self.cpu_cap.note,
            soc=self.soc.describe(),
            context_recoveries=sum(m.pool.recoveries for m in self.models.values()),
            telemetry=telemetry.to_proto(telemetry.sample(sysfs_root=self.config.affinity.sysfs_root)),
            hung_workers=self._hung(self.config.hang_timeout_s),
            uptime_s=time.monotonic() - self.started,
            serving=self.serving.serving,
            not_serving_reasons=self.serving.reasons,
            rps=rps,
            utilization=utilization,
            emulation_model_s_total=model_s,
            emulation_actual_s_total=actual_s,
            stage_cpu=[
                pb.StageCpu(stage=stage, thread=thread, seconds=seconds)
                for (stage, thread), seconds in self.cpu.seconds().items()
                if seconds
            ],
            stage_cpu_frames=self.cpu.frames,
            loop_thread_cpu_s=self.cpu.loop_seconds() or 0.0,
            models=[m.status(name == self.default_model) for name, m in self.models.items()],
        )

    async def GetStatus(
        self, request: pb.NodeStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.NodeStatus:
        return await asyncio.to_thread(self.status)

    async def SetCpuCap(
        self, request: pb.SetCpuCapRequest, context: grpc.aio.ServicerContext
    ) -> pb.NodeStatus:
        await self.admin.check(context, "SetCpuCap")
        mhz = await admin_inputs.require(context, admin_inputs.cpu_cap, request.mhz) or None
        try:
            note = await asyncio.to_thread(self.cpu_cap.set, mhz)
            if self.backend.emulated:  # the cap models the board's CPU: every model's frames stretch
                for served in self.models.values():
                    if served.backend is not self.backend:
                        served.backend.set_cpu_cap(mhz)
        except cpucap.CpuCapError as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"cannot cap the CPU clock: {exc}")
        log.info("CPU cap set to %s%s", f"{mhz} MHz" if mhz else "none", f" ({note})" if note else "")
        return await asyncio.to_thread(self.status)

    async def InjectFault(
        self, request: pb.InjectFaultRequest, context: grpc.aio.ServicerContext
    ) -> pb.NodeStatus:
        await self.admin.check(context, "InjectFault")
        try:
            for served in self.models.values():  # a hung NPU stops every model's contexts
                served.backend.inject_fault(request.fault == pb.FAULT_HANG)
        except BackendError as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        log.warning("fault injected: %s", pb.Fault.Name(request.fault))
        return await asyncio.to_thread(self.status)

    async def SetServing(
        self, request: pb.SetServingRequest, context: grpc.aio.ServicerContext
    ) -> pb.NodeStatus:
        await self.admin.check(context, "SetServing")
        before = self.serving.operator
        self.serving.set_operator(
            await admin_inputs.require(context, admin_inputs.serving_reasons, request.reasons)
        )
        if self.serving.operator != before:
            log.warning("scheduler: %s", ", ".join(self.serving.operator) or "back in rotation")
            await self.publish_health()
        return await asyncio.to_thread(self.status)

    # ------------------------------------------------------------------ health
    async def publish_health(self) -> None:
        serving, not_serving = (
            health_pb2.HealthCheckResponse.SERVING,
            health_pb2.HealthCheckResponse.NOT_SERVING,
        )
        # "" is the board's own health (what the scheduler monitors); Inference adds the operator's
        # exclusions (what proxyless clients health-check).
        await self.health.set("", not_serving if self.serving.hung else serving)
        await self.health.set(SERVICE_NAMES[0], serving if self.serving.serving else not_serving)

    async def watch_hangs(self, interval_s: float = 0.5) -> None:
        """Replace contexts stuck past hang_timeout_s; NOT_SERVING while any slot stays hung."""
        last_failure = ""
        while True:
            recover_after = self.config.hang_timeout_s + (self.config.hang_recovery_s or 0)
            for served in self.models.values():
                if not (self.config.hang_recovery_s and served.pool.hung(recover_after)):
                    continue
                try:
                    replaced = served.pool.recover_hung(recover_after, served.backend.new_context)
                except Exception as exc:  # the runtime may refuse a new context: stay out, retry
                    if str(exc) != last_failure:  # once per reason, not every half second
                        log.error("cannot re-create the hung NPU context (will retry): %s", exc)
                    last_failure, replaced = str(exc), 0
                self.metrics.context_recoveries.inc(replaced)
            hung = self._hung(self.config.hang_timeout_s)
            self.metrics.hung_workers.set(hung)
            self.metrics.in_flight.set(sum(m.pool.busy for m in self.models.values()))
            if self.serving.hung != bool(hung):
                self.serving.hung = bool(hung)
                if hung:
                    log.error(
                        "%d NPU worker(s) hung for more than %.1fs: reporting NOT_SERVING",
                        hung,
                        self.config.hang_timeout_s,
                    )
                await self.publish_health()
            await asyncio.sleep(interval_s)


async def serve(
    config: AgentConfig,
    backend: Backend | Sequence[models.LoadedModel] | None = None,
    ready: asyncio.Event | None = None,
    board_soc: soc.Soc | None = None,
    contexts_source: str | None = None,
) -> None:
    """Run the agent until cancelled. Its CRL (``tls.crl``) is read once, at start: a board takes a new
    CRL at its next (drained) restart."""
    # Before anything starts: a CRL that cannot be used (SecurityError) is a configuration error.
    revocations = Revocations(config.tls) if config.tls else None
    backend = backend or models.load(config, board_soc)
    split = cores.detect(config.affinity.sysfs_root)  # once: the pool's pinning and the I/O threads'
    agent = Agent(config, backend, split, board_soc, contexts_source)
    peer_checked = functools.partial(agent.cpu.add, "peer_check", "loop")
    revoked = [RevocationCheck(revocations, on_checked=peer_checked)] if revocations else []
    if config.affinity.pin_io_to_little and not split.uniform:
        cores.pin_current_thread(split.little)  # gRPC's own threads inherit the main thread's mask
    server = grpc_limits.server(
        config.limits,
        config.max_message_bytes,
        config.queue_limit + agent.contexts_total,
        SERVER_OPTIONS,
        revoked,
    )
    server.add_generic_rpc_handlers((agent.inference_handler(),))
    rpc.add_NodeServicer_to_server(agent, server)
    health_pb2_grpc.add_HealthServicer_to_server(agent.health, server)
    reflection.enable_server_reflection(SERVICE_NAMES, server)
    port = security.add_port(server, config.listen, config.tls)
    agent.cpu.bind_loop()
    await server.start()
    connections = asyncio.create_task(grpc_limits.watch_connections(port, config.limits))
    agent.metrics.serve(config.listen, config.metrics_port, config.metrics_listen, config.tls)
    await agent.publish_health()
    watchdog = asyncio.create_task(agent.watch_hangs())
    log.info(
        "agent %s serving on %s: backend %s%s, %s, %s, CPU cap via %s, affinity %s",
        config.node_name,
        config.listen,
        agent.backend.name,
        " (EMULATED NPU)" if agent.backend.emulated else "",
        ", ".join(
            f"model {m.name}{' (default)' if m.name == agent.default_model else ''}: {m.pool.size} "
            f"context(s) ({m.contexts_source})"
            for m in agent.models.values()
        ),
        agent.soc.describe(),
        agent.cpu_cap.kind,
        split.reason,
    )
    if ready:
        ready.set()
    # No handover for the agent yet (it would need the pid file the scheduler keeps beside its state).
    lifecycle = Lifecycle(server, agent.health, config.shutdown)
    await lifecycle.serving(f"serving on {config.listen}")
    try:
        await lifecycle.run()
        log.info("agent %s shutting down", config.node_name)
    finally:
        watchdog.cancel()
        connections.cancel()
        await lifecycle.stop()
        for served in agent.models.values():
            served.pool.close()
        agent.decoder.close()
