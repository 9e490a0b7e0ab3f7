"""ORCA load reports: the meter's arithmetic, and the trailer a real agent puts on the wire.

grpcio hands ``endpoint-load-metrics-bin`` to its load balancer and never to the application, so the
wire test speaks HTTP/2 itself (the ``h2`` library) to read the trailer as any gRPC client receives it.
"""

from __future__ import annotations

import base64
import socket
import struct

import numpy as np
import pytest
from xds.data.orca.v3.orca_load_report_pb2 import OrcaLoadReport

from npudure.agent.load_report import ORCA_TRAILER, LoadMeter, ServingState
from npudure.proto import inference_pb2 as pb
from npudure_workshop.lab.local import LocalCluster

h2 = pytest.importorskip("h2.connection")


def test_meter_reports_rate_and_busy_fraction_over_its_window() -> None:
    meter = LoadMeter(contexts=2, window_s=1.0)
    meter.started = 0.0
    for i in range(10):  # 10 frames of 0.1 s on 2 contexts within the last second: half busy
        meter.record(0.1, now=1.0 + i * 0.1)
    rps, utilization = meter.snapshot(now=2.0)
    assert rps == pytest.approx(10.0, rel=0.11)
    assert utilization == pytest.approx(0.5, rel=0.11)
    report = OrcaLoadReport.FromString(meter.report(now=2.0))
    assert report.rps_fractional == pytest.approx(rps)
    assert report.application_utilization == pytest.approx(utilization)


def test_meter_forgets_work_older_than_its_window() -> None:
    meter = LoadMeter(contexts=1, window_s=1.0)
    meter.started = 0.0
    meter.record(0.5, now=1.0)
    assert meter.snapshot(now=5.0) == (0.0, 0.0)
    # An idle board still reports a positive utilization: gRPC ignores reports with 0.
    assert OrcaLoadReport.FromString(meter.report(now=5.0)).application_utilization > 0


def test_serving_state_combines_own_and_operator_reasons() -> None:
    state = ServingState()
    assert state.serving
    state.set_operator(["drained", " ", "hot", "drained"])
    assert state.reasons == ["drained", "hot"] and not state.serving
    state.hung = True
    assert state.reasons[0] == "hung"
    state.set_operator([])
    state.hung = False
    assert state.serving


def _grpc_call(address: str, path: str, message: bytes, timeout_s: float = 10.0) -> dict[str, str]:
    """One unary call over h2c; returns the trailers (the response body is discarded)."""
    from h2.config import H2Configuration
    from h2.connection import H2Connection
    from h2.events import ResponseReceived, StreamEnded, TrailersReceived
    from h2.settings import SettingCodes
    from helpers.abuse_clients import grpc_headers

    host, port = address.rsplit(":", 1)
    trailers: dict[str, str] = {}
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        conn = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
        conn.initiate_connection()
        conn.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 1 << 24})
        conn.increment_flow_control_window(1 << 24)
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, grpc_headers(address, path))
        body = b"\x00" + struct.pack(">I", len(message)) + message
        sock.sendall(conn.data_to_send())
        sent, ended = 0, False
        while not ended:
            while sent < len(body) and conn.local_flow_control_window(sid) > 0:
                size = min(
                    conn.local_flow_control_window(sid), conn.max_outbound_frame_size, len(body) - sent
                )
                conn.send_data(sid, body[sent : sent + size], end_stream=sent + size == len(body))
                sent += size
            sock.sendall(conn.data_to_send())
            data = sock.recv(1 << 20)
            assert data, "the agent closed the connection"
            for event in conn.receive_data(data):
                if isinstance(event, TrailersReceived):
                    trailers = dict(event.headers)
                elif isinstance(event, ResponseReceived):
                    assert dict(event.headers)[":status"] == "200"
                elif isinstance(event, StreamEnded):
                    ended = True
                if hasattr(event, "flow_controlled_length") and event.flow_controlled_length:
                    conn.acknowledge_received_data(event.flow_controlled_length, sid)
            sock.sendall(conn.data_to_send())
    return trailers


def test_agent_puts_a_parsable_orca_report_on_every_infer_reply() -> None:
    frame = np.zeros((640, 640, 3), np.uint8).tobytes()
    request = pb.InferRequest(
        request_id="orca", encoding=pb.ENCODING_RAW_RGB, frame=frame
    ).SerializeToString()
    with LocalCluster(boards=1, time_scale=0.5, npu_cores=2) as cluster:
        address = cluster.agents["board1"].address
        reports = []
        for _ in range(5):
            trailers = _grpc_call(address, "/npudure.v1.Inference/Infer", request)
            assert trailers.get("grpc-status") == "0", trailers
            raw = trailers[ORCA_TRAILER]
            reports.append(OrcaLoadReport.FromString(base64.b64decode(raw + "=" * (-len(raw) % 4))))
    last = reports[-1]
    # Five sequential frames on a fresh board: some requests per second, one of two contexts busy at
    # most (sequential calls), so the busy fraction is above 0 and at most one half.
    assert last.rps_fractional > 0
    assert 0 < last.application_utilization <= 0.5 + 1e-6
    assert all(r.rps_fractional > 0 for r in reports)
