"""``npudure check-answers``: the same frames to every board, straight to each agent; the boards whose
detections differ from the majority's are named (playbooks/verify.yml runs it from the scheduler host).

Each frame is sent ``--repeats`` times, all at once, so a board whose NPU contexts are shared between
threads (the reference's silent failure: one request gets another's answer) shows it as a frame that
got different answers from the same board. Hashing: npudure.client.answers.

Exit codes: 0 every board answered and all agree; 1 a board disagrees, is unstable or did not answer;
2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

import grpc

from npudure.argtypes import positive, whole
from npudure.client.answers import PRECISION, BoardAnswers, Verdict, compare, frame_hash
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.scheduler.address import split
from npudure.security import access as security
from npudure.vision import frames

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a raw frame at the largest input size the agent allows (4096)
PROG = "npudure check-answers"


class BoardError(Exception):
    """A board that could not be asked: the message names it and what to check."""


def payloads(count: int, seed: int, size: int) -> list[bytes]:
    """``count`` different seeded frames, raw RGB at the model's input side ``size``."""
    return [frames.synthetic_frame(seed + i, size).tobytes() for i in range(count)]


def ask_board(
    address: str, sent: Sequence[bytes], repeats: int, timeout_s: float, model: str = ""
) -> BoardAnswers:
    """Every frame ``repeats`` times, all in flight at once, straight to the agent's Inference.Infer,
    naming ``model`` ("" = the board's default)."""
    options = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ]
    answers = BoardAnswers(address)
    try:
        with security.channel(address, options) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=timeout_s)
            except grpc.FutureTimeoutError:
                tls = (
                    " (a TLS agent: set NPUDURE_TLS_CA, _CERT and _KEY)"
                    if security.client_tls() is None
                    else ""
                )
                raise BoardError(
                    f"{address}: cannot connect within {timeout_s:g} s: is the agent running there and "
                    f"the address right?{tls}"
                ) from None
            infer = rpc.InferenceStub(channel).Infer
            calls = [
                [
                    infer.future(
                        pb.InferRequest(
                            request_id=f"check-{i}-{r}",
                            encoding=pb.ENCODING_RAW_RGB,
                            frame=frame,
                            model=model,
                        ),
                        timeout=timeout_s,
                    )
                    for i, frame in enumerate(sent)
                ]
                for r in range(repeats)
            ]
            replies = [[call.result() for call in row] for row in calls]
    except grpc.RpcError as exc:
        raise BoardError(
            f"{address}: Infer: {exc.code().name}: {exc.details()}{security.tls_hint(exc)}"
        ) from None
    first = replies[0]
    answers.node, answers.backend = first[0].node, first[0].backend
    answers.emulated = any(reply.emulated for reply in first)
    answers.detections = sum(len(reply.detections) for reply in first)
    answers.repeats = [[frame_hash(row[i].detections) for row in replies] for i in range(len(sent))]
    return answers


def board_status(address: str, timeout_s: float) -> pb.NodeStatus | None:
    """The agent's status for the advice line (model sha256, runtime, contexts); None if it will not say."""
    try:
        with security.channel(address) as channel:
            status: pb.NodeStatus = rpc.NodeStub(channel).GetStatus(pb.NodeStatusRequest(), timeout=timeout_s)
            return status
    except grpc.RpcError:
        return None


Ask = Callable[[str], BoardAnswers]
Status = Callable[[str], "pb.NodeStatus | None"]


def _describe(status: pb.NodeStatus | None) -> str:
    if status is None:
        return "model sha256 ?, runtime ?, contexts ?"
    sha = status.model_sha256[:12] or "-"
    # contexts: an agent from before they were reported apart ran one per NPU core and said so.
    contexts = status.contexts or status.npu_cores
    return f"model sha256 {sha}, runtime {status.runtime_version or '-'}, contexts {contexts}"


def _state(board: BoardAnswers, verdict: Verdict, frame_count: int) -> str:
    unstable = board.unstable_frames
    if unstable:
        return f"UNSTABLE: repeats of frame(s) {', '.join(map(str, unstable))} got different answers"
    differing = next((f for b, f in verdict.disagreeing if b is board), None)
    if differing is None:
        return "agrees"
    if verdict.majority is None:
        return "no majority"
    return f"DIFFERS from the majority on {len(differing)} of {frame_count} frames"


def check(addresses: Sequence[str], ask: Ask, status: Status, frame_count: int) -> int:
    """Ask every board, print one line per board and one line per problem (stderr); the exit code."""
    results: list[BoardAnswers | BoardError] = []
    for address in addresses:
        try:
            results.append(ask(address))
        except BoardError as exc:
            results.append(exc)
    answered = [r for r in results if isinstance(r, BoardAnswers)]
    errors = [str(r) for r in results if isinstance(r, BoardError)]
    verdict = compare(answered)
    width = max(
        len(r.name) if isinstance(r, BoardAnswers) else len(a)
        for r, a in zip(results, addresses, strict=True)
    )
    for address, result in zip(addresses, results, strict=True):
        if isinstance(result, BoardError):
            print(f"{address:<{width}}  did not answer (below)")
            continue
        emulated = " EMULATED" if result.emulated else ""
        print(
            f"{result.name:<{width}}  {result.backend}{emulated}  answers {result.digest[:16]}  "
            f"{result.detections} detections  {_state(result, verdict, frame_count)}"
        )
    _notes(answered, verdict)
    errors += _problems(verdict, answered, status)
    for line in errors:
        print(f"{PROG}: {line}", file=sys.stderr)
    return 1 if errors else 0


def _notes(answered: list[BoardAnswers], verdict: Verdict) -> None:
    if answered and not any(b.detections for b in answered):
        print(
            "note: no board returned a detection for these frames (a sim board returns none unless "
            "sim.synthetic_detections is set): the answers agree trivially and show nothing"
        )
    elif any(b.emulated and b.detections for b in answered):
        print(
            "note: EMULATED boards (sim) return SYNTHETIC detections seeded by the frame: the check covers "
            "their frame and reply path, not a model's answers"
        )
    if len(answered) == 1:
        print("note: one board answered: nothing to compare its answers with (its repeats were compared)")
    elif verdict.majority is not None:
        print(f"{verdict.agreeing} of {len(answered)} boards give the majority's answers")


def _problems(verdict: Verdict, answered: list[BoardAnswers], status: Status) -> list[str]:
    lines = []
    for board in verdict.unstable:
        lines.append(
            f"{board.name}: the same frame got different answers from it across repeats (frame(s) "
            f"{', '.join(map(str, board.unstable_frames))}): an NPU context shared between threads answers "
            f"for another request; check the board's contexts ({_describe(status(board.address))})"
        )
    unstable = {id(b) for b in verdict.unstable}
    reference = next((b for b in answered if b.digest == verdict.majority), None)
    theirs = f"; the majority's {reference.name}: {_describe(status(reference.address))}" if reference else ""
    for board, differing in verdict.disagreeing:
        if id(board) in unstable:
            continue
        where = (
            f"differs from the majority ({verdict.agreeing} of {len(answered)} boards) on "
            f"{len(differing)} frame(s)"
            if verdict.majority is not None
            else f"no majority among the {len(answered)} boards: its answers are not shared by more than half"
        )
        lines.append(
            f"{board.name}: {where}: check its model sha256 and runtime version against the other boards', "
            f"and the board's contexts (its: {_describe(status(board.address))}{theirs})"
        )
    return lines


def _address(text: str) -> str:
    _, host, port = split(text)
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a board agent's host:port, e.g. 10.0.0.11:50051"
        )
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "boards", nargs="+", type=_address, metavar="HOST:PORT", help="each board's agent (not the scheduler)"
    )
    parser.add_argument("--frames", type=whole(2), default=6, help="different seeded frames sent (default 6)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first frame (default 0)")
    parser.add_argument(
        "--size", type=whole(32), default=frames.INPUT_SIZE, help="the model's input side, px (default 640)"
    )
    parser.add_argument(
        "--repeats", type=whole(1), default=2, help="times each frame is sent, all at once (default 2)"
    )
    parser.add_argument("--timeout", type=positive, default=10.0, help="connect and per-request deadline, s")
    parser.add_argument(
        "--model",
        default="",
        help="the model every frame names, on boards that serve several (default: each "
        "board's default; give it when the boards' defaults differ)",
    )


def run(args: argparse.Namespace) -> int:
    duplicates = sorted({a for a in args.boards if args.boards.count(a) > 1})
    if duplicates:
        print(f"{PROG}: {', '.join(duplicates)} given more than once", file=sys.stderr)
        return 2
    try:
        security.client_tls()  # a half-set TLS environment is one line, not a failure per board
    except security.SecurityError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    sent = payloads(args.frames, args.seed, args.size)
    print(
        f"{args.frames} seeded frames (seed {args.seed}, {args.size}x{args.size} raw RGB"
        f"{f', model {args.model}' if args.model else ''}) x {args.repeats} "
        f"repeat(s), all at once, straight to each of {len(args.boards)} board(s); detections hashed by "
        f"{PRECISION}"
    )
    try:
        return check(
            args.boards,
            lambda address: ask_board(address, sent, args.repeats, args.timeout, args.model),
            lambda address: board_status(address, args.timeout),
            args.frames,
        )
    except security.SecurityError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
