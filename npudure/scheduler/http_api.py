"""A DeepStack / CodeProject.AI-compatible detection API, served by the scheduler on its own port.

``POST /v1/vision/detection`` (multipart: ``image``, optional ``min_confidence`` and ``api_key``) and
``GET /v1/server/status/ping``: what Frigate's ``deepstack`` detector, Home Assistant's DeepStack
integration, Blue Iris and Agent DVR speak (docs/http-api.md). A request takes the gRPC path's own
dispatcher — same policy, same queue, same retries, deadlines, no extra hop. The posted JPEG/PNG (any
size) goes to the board as it was posted: the scheduler reads only its header (format, size, bounds:
npudure/scheduler/http_image.py), the board decodes and letterboxes it and answers with boxes in the
posted image's pixels and the model's labels; a body the board cannot decode comes back as
INVALID_ARGUMENT and goes out as HTTP 400.

Why aiohttp: it is asyncio-native, so it runs on the scheduler's own event loop beside grpc.aio
(the dispatcher's reserve/release stays single-threaded and lock-free); it is long and actively
maintained; and it gives what this front needs without more layers — a streamed request body, TLS
through ``ssl``, a pluggable access logger — where Starlette would add uvicorn, its own server loop
and an ASGI layer. (Its multipart reader is not used: npudure/scheduler/http_form.py says why. The
body is read part by part, the API key checked before the image is held:
npudure/scheduler/http_upload.py.)
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import grpc
from aiohttp import hdrs, web
from aiohttp.abc import AbstractAccessLogger

from npudure.config import DEFAULT_MODEL_NAME, HttpApiConfig, SchedulerConfig
from npudure.proto import inference_pb2 as pb
from npudure.proto import timing as stage_timing
from npudure.scheduler import deepstack, placement
from npudure.scheduler.boards import Board
from npudure.scheduler.dispatch import Dispatcher, DispatchError
from npudure.scheduler.http_form import FieldTooLarge, boundary_of
from npudure.scheduler.http_image import Header, ImageError, sniff
from npudure.scheduler.http_site import CappedSite
from npudure.scheduler.http_text import bounded, shown
from npudure.scheduler.http_upload import BudgetExhausted, UnverifiedBytes, read_form
from npudure.scheduler.metrics import SchedulerMetrics
from npudure.security.access import ListenError, SecurityError
from npudure.service.handlers import LOG_EVERY_S, RateLimitedLog
from npudure.vision.labels import labelmap_text


class Scheduler(Protocol):
    """What the API uses of npudure.scheduler.server.Scheduler (named here, so no import cycle)."""

    config: SchedulerConfig
    metrics: SchedulerMetrics
    dispatch: Dispatcher
    boards: list[Board]


log = logging.getLogger(__name__)
access_log = logging.getLogger(f"{__name__}.access")

METHOD = "http_detection"  # the method label of npudure_scheduler_requests_total
RETRY_AFTER_S = "1"
# What all requests may hold before their API key is checked (an image sent before the key), in
# max_body_bytes: one client posting image-first is served while keyless posts cannot hold more.
UNVERIFIED_BODIES = 2
# HTTP statuses as gRPC codes for the shared requests counter.
_CODE_OF_STATUS = {
    200: "OK",
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    408: "DEADLINE_EXCEEDED",
    413: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
# Cluster errors as HTTP statuses: a full or empty cluster is 503 (try again), a deadline 504.
_STATUS_OF_CODE = {
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 503,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class HttpApiError(Exception):
    """A request answered with ``status`` and DeepStack's error shape."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _CODE_OF_STATUS.get(status, "UNKNOWN")


class _DebugAccessLogger(AbstractAccessLogger):
    """One access line per request at DEBUG (camera software posts several frames a second)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.debug(
            '%s "%s %s" %d %.1fms', request.remote, request.method, request.path, response.status, time * 1e3
        )

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.DEBUG)


def http_address(scheduler: SchedulerConfig, api: HttpApiConfig) -> tuple[str, int]:
    if api.listen:
        host, _, port = api.listen.rpartition(":")
        return host.strip("[]"), int(port)
    return scheduler.listen.rpartition(":")[0].strip("[]"), api.port


def read_api_key(path: str | None) -> str | None:
    """The key in ``api_key_file`` (stripped), None when unset; a missing or empty file stops start-up."""
    if path is None:
        return None
    try:
        key = Path(path).read_text().strip()
    except OSError as exc:
        raise SecurityError(f"http_api.api_key_file {path}: cannot read it: {exc.strerror}") from None
    if not key:
        raise SecurityError(f"http_api.api_key_file {path} is empty: put the API key clients send in it")
    return key


def server_ssl(scheduler: SchedulerConfig, api: HttpApiConfig) -> ssl.SSLContext | None:
    tls = scheduler.tls
    if tls is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(tls.cert, tls.key)
        if api.tls_client_auth:
            context.load_verify_locations(tls.ca)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise SecurityError(
            f"HTTP API TLS: cannot load the scheduler's certificate, key or CA: {exc}"
        ) from None
    return context


class HttpApi:
    def __init__(self, scheduler: Scheduler, config: HttpApiConfig, reuse_port: bool = False) -> None:
        self.scheduler = scheduler
        self.reuse_port = reuse_port  # SO_REUSEPORT: the port is shared with a successor (handover)
        self.site: CappedSite | None = None
        self.config = config
        self.api_key = read_api_key(config.api_key_file)
        self._key = None if self.api_key is None else self.api_key.encode()
        self._crash_log = RateLimitedLog(log, LOG_EVERY_S)  # a bug a client can trigger in a loop
        self._unverified = UnverifiedBytes(UNVERIFIED_BODIES * config.max_body_bytes)
        self.active = 0
        self.runner: web.AppRunner | None = None
        self.url = ""
        self._counters = {
            code: scheduler.metrics.requests_by_method.labels(code, METHOD)
            for code in {*_CODE_OF_STATUS.values(), "UNKNOWN", "INTERNAL"}
        }

    # ------------------------------------------------------------------ lifecycle
    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body_bytes, middlewares=[self._errors])
        app.router.add_post("/v1/vision/detection", self.detection)
        app.router.add_get("/v1/server/status/ping", self.ping)
        # Blue Iris lists the models, then posts to custom/<name>: the list route before the dynamic one.
        app.router.add_route("POST", "/v1/vision/custom/list", self.custom_list)
        app.router.add_route("GET", "/v1/vision/custom/list", self.custom_list)
        app.router.add_post("/v1/vision/custom/{model}", self.custom)
        # Frigate's labelmap_path for the default model or one by name (curl -o labelmap.txt ...).
        app.router.add_get("/v1/vision/labelmap", self.labelmap)
        app.router.add_get("/v1/vision/labelmap/{model}", self.labelmap)
        return app

    async def start(self) -> None:
        host, port = http_address(self.scheduler.config, self.config)
        context = server_ssl(self.scheduler.config, self.config)
        self.runner = web.AppRunner(
            self.app(),
            access_log_class=_DebugAccessLogger,
            access_log=access_log,
            # From connection start, a request head must arrive within this too (aiohttp closes a
            # connection that sends no complete request: the slow-loris on headers).
            keepalive_timeout=self.config.read_timeout_s,
            handle_signals=False,
            # A client that hangs up cancels its handler: its request is dropped wherever it waits (the
            # scheduler's queue, a board), never worked for nobody (Frigate gives up after 0.1 s).
            handler_cancellation=True,
        )
        await self.runner.setup()
        try:
            self.site = CappedSite(
                self.runner,
                host,
                port,
                self.config.max_connections,
                self.scheduler.metrics.http_connections_refused.inc,
                ssl_context=context,
                reuse_port=self.reuse_port,
            )
            await self.site.start()
        except OSError as exc:
            await self.stop()
            raise ListenError(
                f"cannot serve the HTTP API on {host}:{port}: {exc.strerror} (http_api.port or "
                "http_api.listen in the scheduler config)"
            ) from None
        self.url = f"{'https' if context else 'http'}://{host}:{port}/v1/vision/detection"
        log.info("DeepStack-compatible HTTP API on %s", self.url)

    async def close_listener(self) -> None:
        """Stop accepting (a handover: new connections go to the successor); requests in flight go on."""
        if self.site is not None:
            site, self.site = self.site, None
            await site.stop()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    # ------------------------------------------------------------------ routes
    @web.middleware
    async def _errors(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Every failure in DeepStack's shape (success false, error), never aiohttp's HTML page."""
        try:
            response = await handler(request)
        except HttpApiError as exc:
            return self._error(request, exc.status, str(exc), exc.code)
        except web.HTTPRequestEntityTooLarge:
            limit = self.config.max_body_bytes
            return self._error(
                request,
                413,
                f"the request is larger than this server's limit of {limit} bytes "
                "(http_api.max_body_bytes): post a smaller image",
            )
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return self._error(request, exc.status, exc.reason)
        except Exception:  # a bug here: logged with its traceback (rate-limited), the client gets one line
            self._crash_log.log(
                logging.ERROR,
                "HTTP API: %s %s failed",
                request.method,
                shown(request.path, quote=False),
                exc_info=True,
            )
            return self._error(
                request, 500, "internal error in the scheduler's HTTP API (see its log)", "INTERNAL"
            )
        if _counted(request.path):
            self._counters["OK"].inc()
        return response

    def _error(
        self, request: web.Request, status: int, message: str, code: str | None = None
    ) -> web.Response:
        if _counted(request.path):
            self._counters.get(
                code or _CODE_OF_STATUS.get(status, "UNKNOWN"), self._counters["UNKNOWN"]
            ).inc()
        headers = {"Retry-After": RETRY_AFTER_S} if status == 503 else None
        return web.json_response(deepstack.error(bounded(message), status), status=status, headers=headers)

    async def ping(self, request: web.Request) -> web.Response:
        up = sum(b.eligible for b in self.scheduler.boards)
        return web.json_response({"success": up > 0, "boards_up": up, "boards": len(self.scheduler.boards)})

    def _models(self) -> tuple[str | None, list[str]]:
        """(the cluster's default model as the boards name it, every model as this API lists it): the
        default first, as ``http_api.model_name`` when set, the others by their own names."""
        boards = self.scheduler.boards
        default = placement.default_model(boards)
        alias = self.config.model_name or default or DEFAULT_MODEL_NAME
        return default, [alias, *(m for m in placement.served(boards) if m not in (default, alias))]

    async def custom_list(self, request: web.Request) -> web.Response:
        """CodeProject.AI's model list (what Blue Iris asks for): every model the boards serve."""
        return web.json_response(
            {"success": True, "models": self._models()[1], "moduleId": deepstack.MODULE_ID, "code": 200}
        )

    async def custom(self, request: web.Request) -> web.Response:
        """A model by name; the default's own name and ``http_api.model_name`` are the default model."""
        name = request.match_info["model"]
        default, listed = self._models()
        if name in listed[1:]:
            return await self.detection(request, name)
        if name in (listed[0], default):
            return await self.detection(request)
        raise HttpApiError(
            404,
            f"no custom model {shown(name)}: this cluster serves {', '.join(map(repr, listed))} "
            f"(/v1/vision/custom/<model>; /v1/vision/detection is {listed[0]}; "
            "/v1/vision/custom/list lists them)",
        )

    async def labelmap(self, request: web.Request) -> web.Response:
        """The model's labelmap as Frigate reads it (``<id>  <name>``), from the boards' own reports:
        the names the answers of this API and of the zmq endpoint carry."""
        name = request.match_info.get("model", "")
        default, listed = self._models()
        is_default = name in ("", listed[0], default)
        if not is_default and name not in listed:
            raise HttpApiError(
                404,
                f"no model {shown(name)}: this cluster serves {', '.join(map(repr, listed))} "
                "(/v1/vision/labelmap/<model>; /v1/vision/labelmap is the default's)",
            )
        names = _reported_names(self.scheduler.boards, "" if is_default else name)
        if names is None:
            raise HttpApiError(
                503,
                f"no board has reported the class names of {shown(name or listed[0])} yet (older agents "
                "do not): retry shortly, or write it with `npudure model labelmap MODEL`",
            )
        return web.Response(text=labelmap_text(names), content_type="text/plain")

    async def detection(self, request: web.Request, model: str = "") -> web.Response:
        received = time.perf_counter()
        if self.active >= self.config.max_concurrency:
            raise HttpApiError(
                503,
                f"the server is at its limit of {self.config.max_concurrency} requests at once "
                "(http_api.max_concurrency); retry shortly",
            )
        self.active += 1
        try:
            return await self._detect(request, received, model)
        finally:
            self.active -= 1

    async def _detect(self, request: web.Request, received: float, model: str) -> web.Response:
        length = request.content_length
        if length is not None and length > self.config.max_body_bytes:
            raise web.HTTPRequestEntityTooLarge(max_size=self.config.max_body_bytes, actual_size=length)
        if not request.content_type.startswith("multipart/"):
            raise HttpApiError(
                400,
                "post a multipart/form-data body with the image as the field 'image' "
                f"(got Content-Type {shown(request.content_type or 'none')})",
            )
        check_key = self._check_key if self._key is not None else None
        try:
            boundary = boundary_of(request.headers.get(hdrs.CONTENT_TYPE, ""))
            form = await asyncio.wait_for(
                read_form(request.content, boundary, self.config.max_body_bytes, check_key, self._unverified),
                self.config.read_timeout_s,
            )
        except TimeoutError:
            raise HttpApiError(
                408,
                f"the request body did not arrive within {self.config.read_timeout_s:g}s "
                "(http_api.read_timeout_s)",
            ) from None
        except FieldTooLarge as exc:
            raise HttpApiError(413, str(exc)) from None
        except BudgetExhausted:
            raise HttpApiError(
                503,
                "too many uploads are being read before their API key is checked: retry shortly, or send "
                "the api_key field before the image",
            ) from None
        except (ValueError, AssertionError) as exc:  # a malformed multipart body
            raise HttpApiError(400, f"the multipart body could not be read: {exc}") from None
        min_confidence = _min_confidence(form.fields.get("min_confidence"))
        data = form.fields.get("image")
        if data is None:
            names = sorted(set(form.names) - {"api_key"})
            fields = ", ".join(shown(k, 20, quote=False) for k in names[:3]) or "none"
            if len(names) > 3:
                fields += f" and {len(names) - 3} more"
            raise HttpApiError(
                400, f"no image: post the image file as the form field 'image' (fields sent: {fields})"
            )
        try:
            header = sniff(data, self.config.max_image_pixels, self.scheduler.config.max_message_bytes)
        except ImageError as exc:
            raise HttpApiError(exc.status, str(exc)) from None
        request_bytes = pb.InferRequest(
            request_id=f"http-{uuid.uuid4().hex[:12]}", encoding=header.encoding, frame=data, model=model
        ).SerializeToString()
        deadline = time.monotonic() + (
            self.config.request_timeout_s or self.scheduler.config.request_timeout_s
        )
        try:
            reply = pb.InferResponse.FromString(
                await self.scheduler.dispatch.forward(request_bytes, deadline, model)
            )
        except DispatchError as exc:
            raise HttpApiError(_STATUS_OF_CODE.get(exc.code, 500), str(exc), exc.code.name) from None
        except grpc.aio.AioRpcError as exc:
            raise _board_refused(exc, header) from None
        return web.json_response(self._answer(reply, header, min_confidence, received))

    def _check_key(self, sent: bytes | None) -> None:
        # Compared as bytes: a key that is not UTF-8 is a wrong key, not an error.
        if self._key is None:
            return
        sent = (sent or b"").strip()
        if not sent:
            raise HttpApiError(401, "this server needs an API key: send it as the form field 'api_key'")
        if not hmac.compare_digest(sent, self._key):
            raise HttpApiError(403, "wrong API key")

    def _answer(
        self, reply: pb.InferResponse, header: Header, min_confidence: float, received: float
    ) -> dict[str, Any]:
        # The board's boxes are in the posted image's pixels already, with the model's labels.
        preds = deepstack.predictions(reply.detections, min_confidence)
        timing = reply.timing
        total_s = time.perf_counter() - received
        # The scheduler's whole time for this request, reading the body included (the dispatcher's
        # figure starts at the forward).
        timing.scheduler_total_us = round(total_s * 1e6)
        return deepstack.success(
            preds,
            reply.node,
            inference_ms=timing.inference_us / 1e3,
            process_ms=timing.board_total_us / 1e3,
            round_trip_ms=total_s * 1e3,
            extra={
                "backend": reply.backend,
                "model": reply.model,
                "emulated": reply.emulated,
                "attempts": reply.attempts,
                "imageWidth": header.width,
                "imageHeight": header.height,
                "timing": stage_timing.as_dict(timing),
            },
        )


def _reported_names(boards: list[Board], model: str) -> tuple[str, ...] | None:
    """The class names a board reports for ``model`` ("" = its default), None when none has."""
    for board in boards:
        for served in board.last_status.models if board.last_status else ():
            if served.class_names and (served.name == model or (not model and served.default)):
                return tuple(served.class_names)
    return None


def _counted(path: str) -> bool:
    """A detection (the default model, or it named as a custom model), not a list or a ping."""
    return path == "/v1/vision/detection" or (
        path.startswith("/v1/vision/custom/") and path != "/v1/vision/custom/list"
    )


def _board_refused(exc: grpc.aio.AioRpcError, header: Header) -> HttpApiError:
    """A board's refusal as the client's answer: what the board could not decode is the image's fault
    (400, as a decoder on this server would say), a message over the board's size limit is 413; the
    rest keep the status of their gRPC code."""
    code, details = exc.code(), exc.details() or ""
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return HttpApiError(400, f"the image could not be decoded: {details}", code.name)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
        return HttpApiError(
            413,
            f"the {header.format} file is larger than the board takes ({details}): post a smaller image",
            code.name,
        )
    return HttpApiError(_STATUS_OF_CODE.get(code, 500), f"the board refused the image: {details}", code.name)


def _min_confidence(value: bytes | str | None) -> float:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    text = None if text is None else text.strip()
    if not text:
        return deepstack.DEFAULT_MIN_CONFIDENCE
    try:
        number = float(text)
    except ValueError:
        number = float("nan")
    if not 0.0 <= number <= 1.0:
        raise HttpApiError(400, f"min_confidence must be a number from 0 to 1 (got {shown(text)})")
    return number


async def start(scheduler: Scheduler, reuse_port: bool = False) -> HttpApi | None:
    """Serve the HTTP API when the scheduler config has ``http_api``; None when it is off."""
    if scheduler.config.http_api is None:
        return None
    api = HttpApi(scheduler, scheduler.config.http_api, reuse_port)
    await api.start()
    return api
