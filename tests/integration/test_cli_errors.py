"""CLI rough edges: each failure ends with one clear line, the right exit code and no traceback
(2 usage, 1 runtime, 78 configuration)."""

from __future__ import annotations

import subprocess
import sys
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from helpers.cli import run_npudure

from npudure.security import pki
from npudure_workshop.lab.local import LocalCluster, free_port


def one_clear_line(proc: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert (len(lines) >= 1 and lines[-1].startswith("npudure")) or "usage:" in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)
    return proc.stderr


def test_infer_with_a_missing_image(tmp_path: Path) -> None:
    proc = run_npudure("infer", "--target", f"127.0.0.1:{free_port()}", "--image", str(tmp_path / "no.jpg"))
    one_clear_line(proc, 2, "no.jpg: no such file")


def test_infer_with_a_file_that_is_not_an_image(tmp_path: Path) -> None:
    notes = tmp_path / "notes.jpg"
    notes.write_text("not a picture\n")
    proc = run_npudure("infer", "--target", f"127.0.0.1:{free_port()}", "--image", str(notes))
    one_clear_line(proc, 2, "notes.jpg: not an image")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["local", "--policy", "fastest"], "invalid choice: 'fastest'"),
        (["agent", "--config", "x.yml", "--log-level", "loud"], "invalid choice: 'LOUD'"),
        (["scheduler", "--config", "x.yml", "--log-level", "chatty"], "invalid choice: 'CHATTY'"),
    ],
)
def test_choices_refuse_unknown_values(argv: list[str], needle: str) -> None:
    one_clear_line(run_npudure(*argv), 2, needle, "least_inflight" if "local" in argv else "WARNING")


def test_bench_with_an_unknown_policy_stops_before_the_result_folder(tmp_path: Path) -> None:
    out = tmp_path / "result"
    argv = ["bench", "run", "--target", f"127.0.0.1:{free_port()}", "--out", str(out), "--policy", "foo"]
    one_clear_line(run_npudure(*argv), 2, "unknown policy 'foo'", "least_inflight")
    assert not out.exists()


@pytest.mark.parametrize(
    ("value", "needle"), [("200", "between 0 and 100"), ("lots", "a percentage such as 5")]
)
def test_bench_with_a_bad_max_steal_stops_before_the_result_folder(
    tmp_path: Path, value: str, needle: str
) -> None:
    out = tmp_path / "result"
    argv = ["bench", "run", "--target", f"127.0.0.1:{free_port()}", "--out", str(out), "--max-steal", value]
    one_clear_line(run_npudure(*argv), 2, "--max-steal", needle)
    assert not out.exists()


def test_bench_with_an_unusable_out_is_refused_before_starting(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / "result"  # a folder below a file: unusable even for root
    proc = run_npudure("bench", "run", "--target", f"127.0.0.1:{free_port()}", "--out", str(out), "--quick")
    one_clear_line(proc, 2, f"--out {out}", "is not a folder")


def test_local_with_an_unusable_workdir(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run_npudure("local", "--boards", "1", "--port", "0", "--workdir", str(blocker / "w"))
    one_clear_line(proc, 1, "cannot use --workdir", "Not a directory")


def test_local_says_why_a_process_did_not_start(tmp_path: Path) -> None:
    missing = tmp_path / "nope.onnx"
    proc = run_npudure(
        "local", "--boards", "1", "--port", "0", "--backend", "onnx", "--model", str(missing), timeout_s=120
    )
    one_clear_line(proc, 1, "board1 did not start", "nope.onnx does not exist")


def test_status_into_a_closed_pipe_exits_quietly() -> None:
    with LocalCluster(boards=1, time_scale=5.0) as cl:
        proc = subprocess.Popen(
            [sys.executable, "-m", "npudure", "status", "--target", cl.address, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        proc.stdout.close()  # like `| head` that has already exited
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_plaintext_client_against_a_tls_server_gets_a_hint(tmp_path: Path) -> None:
    pki.make_ca(tmp_path / "ca")
    issued = pki.issue(tmp_path / "ca", "board", ["127.0.0.1"], tmp_path / "srv")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    credentials = grpc.ssl_server_credentials(
        [(issued.key.read_bytes(), issued.cert.read_bytes())],
        root_certificates=issued.ca.read_bytes(),
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        proc = run_npudure("status", "--target", f"127.0.0.1:{port}", "--timeout", "3")
    finally:
        server.stop(grace=None)
    one_clear_line(proc, 1, "the server speaks TLS", "NPUDURE_TLS_CA")
