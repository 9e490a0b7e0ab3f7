"""The wire contract module agrees with the proto it names, and its option sets say what they mean."""

from __future__ import annotations

from npudure.proto import contract
from npudure.proto import inference_pb2 as pb


def test_names_are_the_protos_own() -> None:
    infer = pb.DESCRIPTOR.services_by_name["Inference"].methods_by_name["Infer"]
    assert f"/{infer.containing_service.full_name}/{infer.name}" == contract.INFER_METHOD
    assert contract.INFER_METHOD == "/npudure.v1.Inference/Infer"  # what deployed clients dial
    assert (contract.NODE, contract.CLUSTER) == ("npudure.v1.Node", "npudure.v1.Cluster")


def test_every_board_state_has_a_short_label() -> None:
    labels = {contract.board_state_label(v.number) for v in pb.BoardState.DESCRIPTOR.values}
    assert {"UP", "DOWN", "DRAINING"} <= labels
    assert not any(label.startswith("BOARD_STATE") for label in labels)
    assert contract.board_state_label(pb.BOARD_STATE_DRAINING) == "DRAINING"


def test_option_sets() -> None:
    assert dict(contract.message_size_options(1 << 20)) == {
        "grpc.max_send_message_length": 1 << 20,
        "grpc.max_receive_message_length": 1 << 20,
    }
    assert dict(contract.reconnect_options()) == {
        "grpc.initial_reconnect_backoff_ms": 200,
        "grpc.max_reconnect_backoff_ms": 2000,
    }
    assert dict(contract.reconnect_options(1000, min_ms=200))["grpc.min_reconnect_backoff_ms"] == 200
