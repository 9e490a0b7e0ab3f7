"""The committed stubs must be exactly what the pinned grpcio-tools makes from inference.proto."""

from pathlib import Path

from npudure.proto.generate import PACKAGE_ROOT, generate


def test_committed_stubs_are_fresh(tmp_path: Path) -> None:
    for generated in generate(tmp_path):
        committed = PACKAGE_ROOT / generated.relative_to(tmp_path)
        assert committed.exists(), f"{committed} missing: run `python -m npudure.proto.generate`"
        assert committed.read_bytes() == generated.read_bytes(), (
            f"{committed.name} is stale: run `python -m npudure.proto.generate` and commit the result"
        )


def test_service_shape() -> None:
    from npudure.proto import inference_pb2 as pb

    infer = pb.DESCRIPTOR.services_by_name["Inference"].methods_by_name["Infer"]
    assert infer.input_type.full_name == "npudure.v1.InferRequest"
    assert infer.output_type.full_name == "npudure.v1.InferResponse"
    assert pb.DESCRIPTOR.package == "npudure.v1"
