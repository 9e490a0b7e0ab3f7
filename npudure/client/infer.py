"""``npudure infer``: send frames (synthetic or your images) to a scheduler or an agent."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np

from npudure.argtypes import positive, whole
from npudure.client import central
from npudure.client.proxyless import Proxyless
from npudure.client.routes import RouteError
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure.vision import frames


class ImageError(Exception):
    """An --image file that cannot be read as an image."""


def load_image(path: Path) -> np.ndarray:
    """An image file letterboxed to a 640x640 RGB frame (boxes come back in that frame's pixels)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return frames.letterbox(image)
    except FileNotFoundError:
        raise ImageError(f"--image {path}: no such file") from None
    except UnidentifiedImageError:
        raise ImageError(f"--image {path}: not an image Pillow can read (JPEG, PNG, BMP, WebP...)") from None
    except (OSError, Image.DecompressionBombError) as exc:
        raise ImageError(f"--image {path}: cannot read it: {exc}") from None


def file_payload(path: Path) -> tuple[pb.Encoding, bytes]:
    """An image file's bytes with the encoding its signature says (JPEG or PNG), sent unchanged."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImageError(f"--image {path}: cannot read it: {exc.strerror or exc}") from None
    if data[:2] == b"\xff\xd8":
        return pb.ENCODING_JPEG, data
    if data[:8] == frames.PNG_MAGIC:
        return pb.ENCODING_PNG, data
    raise ImageError(f"--image {path}: --encoding file sends JPEG or PNG files, and this is neither")


def seeded_frame(seed: int) -> np.ndarray:
    return frames.synthetic_frame(seed)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="127.0.0.1:50050", help="scheduler or agent host:port")
    parser.add_argument("--image", type=Path, action="append", help="image file(s); default: seeded frames")
    parser.add_argument("--count", type=whole(1), default=1, help="requests to send (default 1)")
    parser.add_argument(
        "--encoding",
        choices=("raw", "jpeg", "file"),
        default="raw",
        help="raw/jpeg: the image letterboxed here to 640x640; file: each --image file's JPEG/PNG bytes as "
        "they are (any size: the board letterboxes to its model, boxes come back in the file's pixels)",
    )
    parser.add_argument("--timeout", type=positive, default=10.0, help="per-request deadline, s (default 10)")
    parser.add_argument("--json", action="store_true", help="one JSON line per response")
    parser.add_argument(
        "--proxyless",
        action="store_true",
        help="ask the scheduler at --target for the route and send the frames straight to the boards "
        "(gRPC balances them; docs/proxyless.md)",
    )


# One request, its deadline in seconds -> the reply (the stub's Infer, or the proxyless client's).
Send = Callable[[pb.InferRequest, float], pb.InferResponse]


def _open(args: argparse.Namespace, stack: contextlib.ExitStack) -> Send | None:
    """How this command sends; None when the target did not answer (said on stderr)."""
    if args.proxyless:
        client = stack.enter_context(Proxyless(args.target, route_timeout_s=args.timeout))
        if not args.json:
            print(f"proxyless: {client.route.target} ({', '.join(client.route.board_names)})")
        return client.infer
    channel = stack.enter_context(central.channel(args.target))  # retries UNAVAILABLE: rides out a restart
    if not central.wait_connected(channel, args.timeout):
        hint = central.TLS_HINT if security.client_tls() is None else ""
        print(
            f"npudure infer: cannot connect to {args.target} within {args.timeout:.0f}s: is the "
            f"scheduler (or agent) running there?{hint}",
            file=sys.stderr,
        )
        return None
    stub = rpc.InferenceStub(channel)
    return lambda request, timeout: stub.Infer(request, timeout=timeout)


def run(args: argparse.Namespace) -> int:
    try:
        if args.encoding == "file":
            sent = [file_payload(p) for p in args.image or []]
            if not sent:
                raise ImageError("--encoding file needs --image FILE (a JPEG or PNG)")
        else:
            images = (
                [load_image(p) for p in args.image] if args.image else [seeded_frame(i) for i in range(4)]
            )
            encoding: pb.Encoding = pb.ENCODING_JPEG if args.encoding == "jpeg" else pb.ENCODING_RAW_RGB
            sent = [
                (encoding, frames.encode_jpeg(i) if args.encoding == "jpeg" else i.tobytes()) for i in images
            ]
    except ImageError as exc:
        print(f"npudure infer: {exc}", file=sys.stderr)
        return 2
    nodes: Counter[str] = Counter()
    failures = 0
    with contextlib.ExitStack() as stack:
        try:
            send = _open(args, stack)
        except (RouteError, security.SecurityError) as exc:
            print(f"npudure infer: {exc}", file=sys.stderr)
            return 1
        if send is None:
            return 1
        for n in range(args.count):
            encoding, payload = sent[n % len(sent)]
            request = pb.InferRequest(request_id=f"cli-{n}", encoding=encoding, frame=payload)
            start = time.perf_counter()
            try:
                reply = send(request, args.timeout)
            except grpc.RpcError as exc:
                failures += 1
                print(
                    f"{request.request_id}: {exc.code().name}: {exc.details()}{security.tls_hint(exc)}",
                    file=sys.stderr,
                )
                continue
            ms = (time.perf_counter() - start) * 1e3
            nodes[reply.node] += 1
            if args.json:
                from google.protobuf.json_format import MessageToDict

                print(json.dumps({**MessageToDict(reply, preserving_proto_field_name=True), "client_ms": ms}))
            else:
                emulated = " EMULATED" if reply.emulated else ""
                print(
                    f"{reply.request_id}: node {reply.node} ({reply.backend}{emulated}) {ms:.1f} ms, "
                    f"{len(reply.detections)} detections"
                )
                for d in reply.detections[:5]:
                    print(
                        f"   class {d.class_id}{f' {d.label}' if d.label else ''} score {d.score:.2f} "
                        f"box {d.x1:.0f},{d.y1:.0f},{d.x2:.0f},{d.y2:.0f}"
                    )
    if not args.json:
        print(f"served by: {dict(nodes)}; failures: {failures}")
    return 1 if failures else 0
