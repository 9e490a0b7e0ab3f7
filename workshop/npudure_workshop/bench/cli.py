"""``npudure bench``: run | sweep | scaling | hetero | capacity | local | openloop | recompute | contexts.

Exit codes: 0 finished and every run valid; 3 finished but some runs are invalid (kept and marked);
2 refused before measuring (result folder exists, lease held by another harness, bad arguments);
1 error; 130 interrupted (the cluster is restored and completed runs are written).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from npudure.argtypes import non_negative, positive, split_numbers, whole
from npudure.scheduler.policies import POLICIES
from npudure_workshop.bench.defaults import (
    CAPACITY_CAP_MHZ,
    CAPACITY_POLICIES,
    QUICK_LADDER_MHZ,
    REFERENCE_LADDER_MHZ,
)
from npudure_workshop.bench.validity import HOST_MAX_STEAL_FRACTION

EXIT_OK, EXIT_ERROR, EXIT_REFUSED, EXIT_INVALID_RUNS, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

FULL = {
    "sweep": "1,2,4,8,16",
    "sweep_repetitions": 2,
    "repetitions": 3,
    "duration": 10.0,
    "warmup": 2.0,
    "hetero_ladder": ",".join(map(str, REFERENCE_LADDER_MHZ)),
    "hetero_policies": "round_robin,least_inflight,ect",
}
# --quick: a complete but small run (~1-2 min on emulated boards) for smoke tests and playbooks.
QUICK = {
    "sweep": "1,2,4,8",
    "sweep_repetitions": 2,
    "repetitions": 2,
    "duration": 3.0,
    "warmup": 1.0,
    "hetero_ladder": ",".join(map(str, QUICK_LADDER_MHZ)),
    "hetero_policies": "round_robin,least_inflight",
}


T = TypeVar("T", int, float)


def _number_list(
    text: str, convert: Callable[[str], T], what: str, example: str, bad: Callable[[T], bool], bound: str
) -> list[T]:
    """``text`` as comma-separated ``what`` via ``convert``; refused when empty or any value is ``bad``."""
    values = split_numbers(text, convert, what, example)
    if not values or any(bad(v) for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected {bound}")
    return values


def _caps_mhz(text: str) -> list[int]:
    """CPU caps in MHz (0 = no cap)."""
    return _number_list(text, int, "integers", "0,1608,1200", lambda v: v < 0, "non-negative integers")


def _concurrencies(text: str) -> list[int]:
    return _number_list(text, int, "integers", "1,2,4,8", lambda v: v < 1, "integers of 1 or more")


def _floats(text: str) -> list[float]:
    return _number_list(text, float, "numbers", "10,20,40", lambda v: v <= 0, "positive numbers")


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a percentage such as 5") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a percentage between 0 and 100")
    return value


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _policy(text: str) -> str:
    """A scheduler policy name, checked against the scheduler's own registry."""
    if text not in POLICIES:
        raise argparse.ArgumentTypeError(f"unknown policy {text!r}; use one of: {', '.join(POLICIES)}")
    return text


def _policies(text: str) -> list[str]:
    names = [_policy(n) for n in _names(text)]
    if not names:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated policy names")
    return names


def _common(p: argparse.ArgumentParser) -> None:
    """The options every measuring subcommand shares, in groups (`npudure bench run --help`)."""
    target = p.add_argument_group("target and transport")
    windows = p.add_argument_group("measurement windows (validity)")
    frames = p.add_argument_group("frames sent")
    watch = p.add_argument_group("observation and progress")
    target.add_argument("--target", required=True, help="the scheduler's gRPC address, host:port")
    target.add_argument(
        "--out", help="result folder to create (must not exist; default results/<UTC time>-<id>/)"
    )
    target.add_argument(
        "--mode",
        choices=("scheduler", "proxyless", "both"),
        default="scheduler",
        help="how the load reaches the boards: through the scheduler, proxyless (the client balances over "
        "the scheduler's route, frames go straight to the boards), or both one after the other",
    )
    target.add_argument(
        "--api",
        choices=("grpc", "http", "zmq"),
        default="grpc",
        help="send frames over gRPC, as JPEGs through the scheduler's DeepStack-compatible HTTP API, or "
        "as raw tensors through its Frigate zmq endpoint (one REQ socket per frame in flight, as "
        "Frigate's detectors)",
    )
    target.add_argument(
        "--zmq-endpoint",
        help="--api zmq: the endpoint (default tcp://TARGET-HOST:5555)",
    )
    target.add_argument(
        "--http-url",
        help="--api http: the detection URL (default http://TARGET-HOST:50080/v1/vision/detection)",
    )
    target.add_argument(
        "--http-image-size", default="320", help="--api http: JPEG size, N or WxH (default 320)"
    )
    target.add_argument(
        "--connections", type=whole(1), default=2, help="harness gRPC connections to the scheduler"
    )
    target.add_argument("--timeout", type=positive, default=30.0, help="per-request deadline, s")
    windows.add_argument(
        "--quick", action="store_true", help="small complete run: short windows, fewer points"
    )
    windows.add_argument(
        "--duration", type=positive, help="measurement window per run, s (default 10; quick 3)"
    )
    windows.add_argument(
        "--warmup", type=non_negative, help="warm-up per run, discarded, s (default 2; quick 1)"
    )
    windows.add_argument(
        "--min-samples",
        type=whole(0),
        default=100,
        help="extend each window until this many successful requests (default 100)",
    )
    windows.add_argument(
        "--max-duration", type=positive, help="longest window when extending for --min-samples, s"
    )
    windows.add_argument(
        "--max-steal",
        type=_percent,
        default=HOST_MAX_STEAL_FRACTION * 100,
        metavar="PCT",
        help="a run is invalid when the hypervisor stole more than this %% of the host's CPU "
        # %%, not %: argparse %-formats help strings, and a lone % made every bench --help a traceback
        f"(default {HOST_MAX_STEAL_FRACTION * 100:g}%%; recorded with each run)",
    )
    frames.add_argument(
        "--encoding", choices=("raw", "jpeg"), default="raw", help="raw RGB frames, or JPEG files"
    )
    frames.add_argument(
        "--frame-size",
        type=whole(32),
        default=640,
        help="side of the square synthetic frames (raw and jpeg) and --api zmq tensors; the board "
        "letterboxes sizes that are not the model's (default 640; Frigate's models are often 320)",
    )
    frames.add_argument("--images", help="folder of images to send (centre-cropped, resized to 640x640)")
    models = frames.add_mutually_exclusive_group()
    models.add_argument(
        "--model", help="the model every frame names (InferRequest.model; default: the cluster's default)"
    )
    models.add_argument(
        "--mix",
        help="a mixed load over models, MODEL=WEIGHT pairs, e.g. general=3,plates=1: the frames name "
        "them in that ratio and each run reports every model's throughput and tails",
    )
    frames.add_argument(
        "--frames", type=whole(1), help="distinct frames (default 16 synthetic, or all --images)"
    )
    frames.add_argument(
        "--seed", type=int, default=0, help="seed of the synthetic frames and Poisson arrivals"
    )
    watch.add_argument(
        "--scheduler-pid",
        type=int,
        action="append",
        help="pid of the scheduler process for the CPU-saturation check (found by itself when "
        "the scheduler listens on this host)",
    )
    watch.add_argument(
        "--no-direct-telemetry",
        action="store_true",
        help="read board telemetry only from the scheduler's cache (boards not reachable from here)",
    )
    watch.add_argument(
        "--progress",
        choices=("auto", "bar", "lines", "quiet"),
        default="auto",
        help="how progress is shown (auto: a bar on a terminal, lines otherwise)",
    )
    watch.add_argument(
        "--expect-reboot",
        action="append",
        default=[],
        metavar="BOARD",
        help="a board that will be rebooted or taken away during the runs on purpose (a fault suite): "
        "noted as expected_reboot, not invalid (repeatable)",
    )


def _capacity_args(p: argparse._ActionsContainer) -> None:
    p.add_argument(
        "--cap-mhz",
        type=whole(1),
        default=CAPACITY_CAP_MHZ,
        help=f"capacity: the one board's CPU cap (default {CAPACITY_CAP_MHZ})",
    )
    p.add_argument(
        "--capacity-policies",
        type=_policies,
        help=f"capacity: policies compared (default {','.join(CAPACITY_POLICIES)})",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench_command", metavar="ACTION", required=True)
    run = sub.add_parser("run", help="sweep → operating point → scaling 1..N → heterogeneity dial")
    _common(run)
    series = run.add_argument_group("sweep and scaling")
    dial = run.add_argument_group("heterogeneity dial")
    more = run.add_argument_group("more experiments (off unless asked)")
    series.add_argument(
        "--boards-max", type=whole(1), help="scale up to this many boards (default: all active)"
    )
    _sweep_arg(series)
    series.add_argument("--sweep-repetitions", type=whole(1), help="repetitions of the sweep (default 2)")
    series.add_argument(
        "--repetitions", type=whole(1), help="repetitions per node count (default 3; quick 2)"
    )
    series.add_argument(
        "--policy", type=_policy, help="scheduler policy for sweep and scaling (default: as configured)"
    )
    _dial_args(dial, "policies compared on the dial")
    dial.add_argument("--no-hetero", action="store_true", help="skip the heterogeneity dial")
    more.add_argument("--openloop-rates", type=_floats, help="also run open loop at these rates, inf/s")
    more.add_argument(
        "--capacity",
        action="store_true",
        help="also measure each board alone and all together per policy, one capped",
    )
    _capacity_args(more)
    more.add_argument(
        "--local",
        action="store_true",
        help="also compare each board straight at its agent with the cluster path",
    )

    sweep = sub.add_parser("sweep", help="concurrency sweep and operating point")
    _common(sweep)
    sweep_options = sweep.add_argument_group("sweep")
    _sweep_arg(sweep_options)
    _series_args(sweep_options, f"default {FULL['sweep_repetitions']}")

    scaling = sub.add_parser("scaling", help="1..N boards at a given per-board concurrency")
    _common(scaling)
    scaling_options = scaling.add_argument_group("scaling")
    _operating_point(scaling_options)
    _series_args(scaling_options, f"default {FULL['repetitions']}; quick {QUICK['repetitions']}")

    hetero = sub.add_parser("hetero", help="cap one board's CPU down a ladder, per policy")
    _common(hetero)
    hetero_options = hetero.add_argument_group("hetero")
    _operating_point(hetero_options)
    _dial_args(hetero_options, "policies compared")
    hetero_options.add_argument("--repetitions", type=whole(1), default=1, help="repetitions per cap")

    capacity = sub.add_parser(
        "capacity",
        help="one board capped: each board alone, then all together per policy (fraction of capacity)",
    )
    _common(capacity)
    capacity_options = capacity.add_argument_group("capacity")
    _operating_point(capacity_options)
    _capacity_args(capacity_options)
    _hetero_board_arg(capacity_options)
    capacity_options.add_argument("--repetitions", type=whole(1), default=1, help="repetitions per setting")

    local = sub.add_parser(
        "local", help="the same load straight at each board's agent and through the cluster"
    )
    _common(local)
    local_options = local.add_argument_group("local")
    local_options.add_argument(
        "--concurrency", type=whole(1), required=True, help="requests outstanding at the one board"
    )
    local_options.add_argument(
        "--board", help="the one board to measure (default: each active board in turn)"
    )
    local_options.add_argument(
        "--repetitions", type=whole(1), default=1, help="repetitions per board and path"
    )

    openloop = sub.add_parser("openloop", help="open loop at fixed rates (latency from intended send time)")
    _common(openloop)
    openloop_options = openloop.add_argument_group("openloop")
    openloop_options.add_argument(
        "--rates", type=_floats, required=True, help="requests per second, e.g. 20,40"
    )
    openloop_options.add_argument(
        "--arrival", choices=("poisson", "constant"), default="poisson", help="how sends are spaced"
    )
    openloop_options.add_argument("--repetitions", type=whole(1), default=1, help="repetitions per rate")
    openloop_options.add_argument(
        "--boards-max", type=whole(1), help="use at most this many boards (default: all active)"
    )

    recompute = sub.add_parser("recompute", help="recompute a result folder's figures from its raw samples")
    recompute.add_argument("result_dir", type=Path)

    from npudure_workshop.bench import (
        contexts_cli,  # light: argparse types only; the sweep imports what it runs
    )

    contexts_cli.add_arguments(
        sub.add_parser(
            "contexts",
            help="one board by inference-context count (agents started here): throughput, latency, "
            "agent CPU and memory, and the operating point",
        )
    )


def _operating_point(p: argparse._ActionsContainer) -> None:
    p.add_argument(
        "--concurrency", type=whole(1), required=True, help="per-board concurrency (operating point)"
    )


def _sweep_arg(p: argparse._ActionsContainer) -> None:
    p.add_argument(
        "--sweep", type=_concurrencies, help="per-board concurrencies (default 1,2,4,8,16; quick 1,2,4,8)"
    )


def _hetero_board_arg(p: argparse._ActionsContainer) -> None:
    p.add_argument("--hetero-board", help="board to cap (default: the first active board)")


def _dial_args(p: argparse._ActionsContainer, compared: str) -> None:
    """The heterogeneity dial's ladder, policies (their help starting with ``compared``) and board, in
    `bench run` and `bench hetero`."""
    p.add_argument(
        "--hetero-ladder", type=_caps_mhz, help="CPU caps in MHz for one board (default reference ladder)"
    )
    p.add_argument(
        "--hetero-policies",
        type=_policies,
        help=f"{compared} (default {FULL['hetero_policies']}; quick {QUICK['hetero_policies']})",
    )
    _hetero_board_arg(p)


def _series_args(p: argparse._ActionsContainer, repetitions: str) -> None:
    """sweep's and scaling's --repetitions (``repetitions``: its default, said), --boards-max and --policy."""
    p.add_argument("--repetitions", type=whole(1), help=f"repetitions per point ({repetitions})")
    p.add_argument("--boards-max", type=whole(1), help="use at most this many boards (default: all active)")
    p.add_argument("--policy", type=_policy, help="scheduler policy (default: as configured)")


def _default(args: argparse.Namespace, name: str) -> Any:
    value = getattr(args, name, None)
    if value is not None:
        return value
    table = QUICK if args.quick else FULL
    raw = table[name]
    if name == "sweep":
        return _concurrencies(str(raw))
    if name == "hetero_ladder":
        return _caps_mhz(str(raw))
    if name == "hetero_policies":
        return _policies(str(raw))
    return raw


def _tune_malloc() -> None:
    """Keep glibc from returning each 1.2 MB buffer to the kernel after every request (measured on this
    kind of VM: ~3 µs per page fault, 1.66 → 0.08 ms per 1.2 MB copy); same values as the servers use."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 64 * 1024 * 1024)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1024 * 1024 * 1024)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _api_settings(args: argparse.Namespace) -> tuple[str, str | None, str | None]:
    """BenchSettings' (api, http_url, zmq_endpoint)."""
    if args.api == "http":
        from npudure_workshop.bench.http_load import default_url

        return "http", args.http_url or default_url(args.target), None
    if args.api == "zmq":
        from npudure_workshop.bench.zmq_load import default_endpoint

        return "zmq", None, args.zmq_endpoint or default_endpoint(args.target)
    return "grpc", None, None


def run(args: argparse.Namespace) -> int:
    if args.bench_command == "recompute":
        return _recompute(args.result_dir)
    if args.bench_command == "contexts":
        from npudure_workshop.bench import contexts_cli

        _tune_malloc()
        return contexts_cli.run(args)
    from npudure_workshop.bench.cluster import BenchError
    from npudure_workshop.bench.experiments.sweep import operating_concurrency
    from npudure_workshop.bench.lease import LeaseRefused
    from npudure_workshop.bench.payloads import FrameSourceError, make_frame_set
    from npudure_workshop.bench.results import ResultDirExists
    from npudure_workshop.bench.session import BenchSession, BenchSettings, BoardsRefused
    from npudure_workshop.bench.terminal import summary_text

    if args.out and (problem := _unwritable(Path(args.out))):
        print(f"npudure bench: --out {args.out}: {problem}", file=sys.stderr)
        return EXIT_REFUSED
    _tune_malloc()
    api, http_url, zmq_endpoint = _api_settings(args)
    settings = BenchSettings(
        warmup_s=_default(args, "warmup"),
        duration_s=_default(args, "duration"),
        min_samples=args.min_samples,
        max_duration_s=args.max_duration,
        timeout_s=args.timeout,
        harness_connections=args.connections,
        direct_telemetry=not args.no_direct_telemetry,
        api=api,
        http_url=http_url,
        zmq_endpoint=zmq_endpoint,
        max_steal_fraction=args.max_steal / 100,
    )
    try:
        count = args.frames if args.frames else (None if args.images else 16)
        if args.api != "grpc" and (args.mode != "scheduler" or args.images):
            print(
                f"npudure bench: --api {args.api} goes through the scheduler: drop --mode/--images",
                file=sys.stderr,
            )
            return EXIT_REFUSED
        if args.api == "http":
            from npudure_workshop.bench.http_load import http_frame_set, parse_size

            frames = http_frame_set(parse_size(args.http_image_size), count or 16, args.seed)
        elif args.api == "zmq":
            from npudure_workshop.bench.zmq_load import zmq_frame_set

            frames = zmq_frame_set(args.frame_size, count or 16, args.seed)
        else:
            frames = make_frame_set(args.encoding, count, args.seed, args.images, args.frame_size)
        if args.model or args.mix:
            from npudure_workshop.bench.payloads import parse_mix, with_models

            if args.api != "grpc":
                print(
                    f"npudure bench: --model/--mix name models over gRPC only; an --api {args.api} run "
                    "sends every frame to the default model: drop --model/--mix or use --api grpc",
                    file=sys.stderr,
                )
                return EXIT_REFUSED
            frames = with_models(frames, parse_mix(args.mix or args.model))
    except FrameSourceError as exc:
        print(f"npudure bench: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM restores the cluster like Ctrl-C
    session = BenchSession(
        args.target,
        args.out,
        settings,
        frames,
        scheduler_pids=args.scheduler_pid,
        progress=args.progress,
        command=["npudure", *sys.argv[1:]],
        expect_reboot=tuple(args.expect_reboot),
        board_check=board_check(args),
    )
    try:
        with session:
            _dispatch(session, args, operating_concurrency)
    except (ResultDirExists, LeaseRefused, BoardsRefused) as exc:
        print(f"npudure bench: refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except (BenchError, ValueError, ConnectionError) as exc:
        print(f"npudure bench: {exc}", file=sys.stderr)
        _print_summary(session, summary_text)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(
            "npudure bench: interrupted; cluster settings restored, completed runs written", file=sys.stderr
        )
        _print_summary(session, summary_text)
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)
    _print_summary(session, summary_text)
    for problem in session.restore_problems:
        print(f"npudure bench: WARNING: {problem}", file=sys.stderr)
    if session.summary and session.summary["runs_invalid"]:
        return EXIT_INVALID_RUNS
    return EXIT_ERROR if session.restore_problems else EXIT_OK


def _unwritable(out: Path) -> str | None:
    """Why the result folder cannot be made there (checked before the lease is taken), or None."""
    parent = next((p for p in (out.parent, *out.parent.parents) if p.exists()), Path("."))
    if not parent.is_dir():
        return f"{parent} is not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{parent} is not writable by this user"
    return None


def _print_summary(session: Any, summary_text: Any) -> None:
    if session.summary is not None and session.result is not None:
        print(summary_text(session.summary, session.result.path))


def board_check(args: argparse.Namespace) -> Callable[[list[str]], None]:
    """What the command asks of the active boards, checked by the session before it makes a result
    folder: a mistyped --hetero-board in `bench run` used to be found after the sweep and scaling."""
    from npudure_workshop.bench.experiments.base import require_active
    from npudure_workshop.bench.experiments.hetero import cap_board

    def check(active: list[str]) -> None:
        boards = _boards_in_use(args, active)
        cmd = args.bench_command
        if cmd == "hetero":
            cap_board(boards, args.hetero_board)
        elif cmd == "capacity":
            cap_board(boards, args.hetero_board, "the capacity experiment")
        elif cmd == "run":
            require_active(boards, args.hetero_board, "--hetero-board")
        elif cmd == "local":
            require_active(boards, args.board, "--board")
            if not boards:
                raise ValueError("no board is active: nothing to measure (npudure status shows why)")

    return check


def _boards_in_use(args: argparse.Namespace, active: list[str]) -> list[str]:
    """The active boards this command may load: the first --boards-max of them (`bench run` only)."""
    boards_max = getattr(args, "boards_max", None)
    return active[:boards_max] if boards_max else active


def _dispatch(session: Any, args: argparse.Namespace, operating_concurrency: Any) -> None:
    session.boards = _boards_in_use(args, session.boards)
    policy = getattr(args, "policy", None)
    if policy:
        session.guard.set_policy(policy)
    for via in ("scheduler", "proxyless") if args.mode == "both" else (args.mode,):
        _dispatch_one(session, args, operating_concurrency, via)


def _dispatch_one(session: Any, args: argparse.Namespace, operating_concurrency: Any, via: str) -> None:
    cmd = args.bench_command
    if cmd == "sweep":
        reps = args.repetitions or _default(args, "sweep_repetitions")
        session.run("sweep", via, per_board=_default(args, "sweep"), repetitions=reps)
    elif cmd == "scaling":
        session.run("scaling", via, per_board=args.concurrency, repetitions=_default(args, "repetitions"))
    elif cmd == "hetero":
        _hetero(session, args, via, args.concurrency, args.repetitions)
    elif cmd == "capacity":
        _capacity(session, args, via, args.concurrency, args.repetitions)
    elif cmd == "local":
        session.run("local", via, per_board=args.concurrency, board=args.board, repetitions=args.repetitions)
    elif cmd == "openloop":
        session.run(
            "openloop",
            via,
            rates=args.rates,
            arrival=args.arrival,
            seed=args.seed,
            repetitions=args.repetitions,
        )
    elif cmd == "run":
        sweep = session.run(
            "sweep", via, per_board=_default(args, "sweep"), repetitions=_default(args, "sweep_repetitions")
        )
        per_board = operating_concurrency(sweep)
        if per_board is None:
            session.progress.note(f"no valid sweep run ({via}): no operating point; stopping before scaling")
            return
        session.run("scaling", via, per_board=per_board, repetitions=_default(args, "repetitions"))
        if not args.no_hetero and len(session.boards) >= 2:
            _hetero(session, args, via, per_board, 1)
        if args.capacity and len(session.boards) >= 2:
            _capacity(session, args, via, per_board, 1)
        if args.local:
            session.run("local", via, per_board=per_board, board=args.hetero_board, repetitions=1)
        if args.openloop_rates:
            session.run("openloop", via, rates=args.openloop_rates, arrival="poisson", seed=args.seed)


def _hetero(session: Any, args: argparse.Namespace, via: str, per_board: int, repetitions: int) -> None:
    session.run(
        "hetero",
        via,
        per_board=per_board,
        ladder=_default(args, "hetero_ladder"),
        # Proxyless: the scheduler's policy routes nothing, so one pass (the client's balancing).
        policies=_default(args, "hetero_policies") if via == "scheduler" else [None],
        board=args.hetero_board,
        repetitions=repetitions,
    )


def _capacity(session: Any, args: argparse.Namespace, via: str, per_board: int, repetitions: int) -> None:
    session.run(
        "capacity",
        via,
        per_board=per_board,
        policies=args.capacity_policies or list(CAPACITY_POLICIES),
        cap_mhz=args.cap_mhz,
        board=args.hetero_board,
        repetitions=repetitions,
    )


def _recompute(folder: Path) -> int:
    from npudure_workshop.bench.recompute import recompute

    try:
        fresh, diffs = recompute(folder)
    except (FileNotFoundError, ValueError) as exc:  # not a result folder, or a kind this version lacks
        print(f"npudure bench recompute: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if diffs:
        print(f"{folder}: {len(diffs)} figure(s) in summary.json do NOT match the raw samples:")
        for d in diffs[:50]:
            print(f"  {d}")
        return EXIT_ERROR
    print(
        f"{folder}: recomputed {fresh['runs_total']} runs from raw samples; every figure matches "
        f"summary.json ({fresh['runs_valid']} valid, {len(fresh['runs_invalid'])} invalid)"
    )
    return EXIT_OK
