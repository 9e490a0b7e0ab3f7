"""``npudure bench contexts``'s arguments, their checks (a usage error is one line and exit 2, before any
agent starts) and its exit codes, as the other bench commands: 0 every run valid, 3 finished with
invalid runs (or no operating point), 2 refused, 1 error, 130 interrupted."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from npudure.argtypes import non_negative, positive, whole
from npudure_workshop.bench import contexts_rule as rule

PROG = "npudure bench contexts"
EXIT_OK, EXIT_ERROR, EXIT_REFUSED, EXIT_INVALID_RUNS, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
# Fields of a board's agent config that belong to the board's own service, not to the agents the sweep
# starts on loopback (its address and ports, its name, its credentials).
SERVICE_FIELDS = ("node_name", "listen", "metrics_port", "metrics_listen", "tls", "admin", "contexts")
FULL_WINDOW, QUICK_WINDOW = (2.0, 10.0), (1.0, 3.0)  # (warm-up, window) s, as `bench run` and --quick


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--contexts",
        type=rule.context_counts,
        metavar="N,N,...",
        help=f"context counts to measure (default {','.join(map(str, rule.SWEEP))}; "
        f"{rule.DEFAULT_CONTEXTS}, the agent's default, is always added)",
    )
    p.add_argument(
        "--backend", choices=("sim", "onnx", "rknn"), help="default: the --agent-config's, else sim"
    )
    p.add_argument(
        "--agent-config",
        type=Path,
        metavar="FILE",
        help="the board's agent config (model, postprocess, affinity...): its address, name and "
        "credentials are replaced, contexts set per count",
    )
    p.add_argument("--model", help="onnx/rknn model (default: the agent config's; onnx: the built YOLOv8n)")
    p.add_argument(
        "--record",
        metavar="MODEL",
        help="write the operating point into MODEL's record beside it (MODEL.json, key contexts), which "
        "an agent with contexts: auto takes",
    )
    p.add_argument(
        "--time-scale",
        type=positive,
        help="sim: service-time multiplier (default: the --agent-config's sim.time_scale, else 1)",
    )
    p.add_argument(
        "--load-factor",
        type=positive,
        default=rule.LOAD_FACTOR,
        help=f"closed loop at this many requests outstanding per context (default {rule.LOAD_FACTOR:g})",
    )
    p.add_argument("--out", help="result folder to create (must not exist; default results/<UTC time>-<id>/)")
    p.add_argument("--quick", action="store_true", help="short windows (warm-up 1 s, window 3 s)")
    p.add_argument("--duration", type=positive, help="measurement window per run, s (default 10; quick 3)")
    p.add_argument("--warmup", type=non_negative, help="warm-up per run, s (default 2; quick 1)")
    p.add_argument(
        "--min-samples", type=whole(0), default=100, help="extend a window to this many (default 100)"
    )
    p.add_argument("--repetitions", type=whole(1), default=1, help="runs per path and count (default 1)")
    p.add_argument("--encoding", choices=("raw", "jpeg"), default="raw")
    p.add_argument("--frames", type=whole(1), default=16, help="distinct synthetic frames (default 16)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic frames")
    p.add_argument("--timeout", type=positive, default=30.0, help="per-request deadline, s")
    p.add_argument("--progress", choices=("auto", "bar", "lines", "quiet"), default="auto")


class Refused(Exception):
    """Arguments that cannot work together: one line, exit 2."""


def _base_agent(path: Path | None) -> dict[str, Any]:
    """The agent config's fields the sweep's agents keep (validated as the agent validates it)."""
    if path is None:
        return {}
    from npudure.config import AgentConfig, ConfigError, load

    try:
        config = load(AgentConfig, path)
    except ConfigError as exc:
        raise Refused(f"--agent-config {exc}".replace("\n", " ")) from None
    fields = config.model_dump(mode="json", exclude_unset=True)
    return {k: v for k, v in fields.items() if k not in SERVICE_FIELDS}


def _model(args: argparse.Namespace, backend: str, base: dict[str, Any]) -> str | None:
    """The model the agents load; --record must name that one (its record is what the agent reads)."""
    model = args.model or base.get("model")
    if backend == "sim":
        if args.record:
            raise Refused("--record needs a model: the sim backend runs none (use --backend onnx or rknn)")
        return None
    if args.record:
        if model and Path(model).resolve() != Path(args.record).resolve():
            raise Refused(f"--record {args.record}: the agents run {model}; record the model they measure")
        model = model or args.record
    if model is None and backend == "rknn":
        raise Refused("the rknn backend needs a model: --model FILE.rknn or an --agent-config that names one")
    return model


def _sweep(args: argparse.Namespace) -> Any:
    from npudure_workshop.bench.contexts import Sweep
    from npudure_workshop.bench.contexts_record import RecordError, check_recordable
    from npudure_workshop.bench.payloads import FrameSourceError, make_frame_set
    from npudure_workshop.bench.settings import BenchSettings

    base = _base_agent(args.agent_config)
    backend = args.backend or base.get("backend") or "sim"
    base.pop("backend", None)
    model = _model(args, backend, base)
    base.pop("model", None)
    if args.record:
        try:
            check_recordable(args.record)
        except RecordError as exc:
            raise Refused(str(exc)) from None
    if backend == "onnx" and model is None:
        from npudure_workshop.model import ensure_model  # built once, then cached (as `npudure local`)

        model = str(ensure_model().path)
    warmup, duration = QUICK_WINDOW if args.quick else FULL_WINDOW
    try:
        frames = make_frame_set(args.encoding, args.frames, args.seed)
    except FrameSourceError as exc:
        raise Refused(str(exc)) from None
    return Sweep(
        backend=backend,
        counts=rule.sweep_counts(args.contexts),
        load_factor=args.load_factor,
        time_scale=args.time_scale or base.get("sim", {}).get("time_scale") or 1.0,
        bench=BenchSettings(
            warmup_s=args.warmup if args.warmup is not None else warmup,
            duration_s=args.duration or duration,
            min_samples=args.min_samples,
            timeout_s=args.timeout,
        ),
        frames=frames,
        repetitions=args.repetitions,
        model=model,
        base_agent=base,
        progress=args.progress,
        command=["npudure", *sys.argv[1:]],
    )


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(args: argparse.Namespace) -> int:
    from npudure_workshop.bench import contexts
    from npudure_workshop.bench.cluster import BenchError
    from npudure_workshop.bench.results import ResultDirExists

    try:
        sweep = _sweep(args)
        folder = contexts.make_folder(args.out)
    except (Refused, ResultDirExists) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    for line in contexts.conditions_lines(sweep):
        print(line, flush=True)

    def note(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM stops the agents like Ctrl-C
    points: list[Any] = []
    try:
        contexts.run_sweep(sweep, folder, note, points)
    except KeyboardInterrupt:
        if points:
            contexts.print_results(points, folder)
        print(f"{PROG}: interrupted; agents stopped, finished counts written to {folder}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (BenchError, RuntimeError, TimeoutError, ValueError, ConnectionError) as exc:
        # An agent that would not start (its own last log line), a bench error: one line.
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        signal.signal(signal.SIGTERM, previous)
    contexts.print_results(points, folder)
    return _finish(args, sweep, points, folder)


def _finish(args: argparse.Namespace, sweep: Any, points: list[Any], folder: Path) -> int:
    from npudure_workshop.bench import contexts
    from npudure_workshop.bench.contexts_record import RecordError, write_contexts

    op = contexts.operating_points(points)["agent"]
    invalid = any(v.runs_valid < v.runs_total for p in points for v in p.paths.values())
    if args.record:
        if op is None:
            print(f"{PROG}: no operating point: {args.record}'s record is left as it was", file=sys.stderr)
            return EXIT_INVALID_RUNS
        measured = {
            "by": "npudure bench contexts",
            "throughput_inf_per_s": round(op.throughput, 2),
            "peak_contexts": op.peak_contexts,
            "peak_throughput_inf_per_s": round(op.peak_throughput, 2),
            "backend": sweep.backend,
            "result": str(folder),
        }
        try:
            path = write_contexts(args.record, op.contexts, measured)
        except (RecordError, OSError) as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return EXIT_ERROR
        print(f"recorded: contexts {op.contexts} in {path} (agents with contexts: auto take it)")
    return EXIT_INVALID_RUNS if invalid or op is None else EXIT_OK
