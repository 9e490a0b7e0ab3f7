"""Runs INSIDE rknn-toolkit2's own virtualenv (model/toolkit.py starts it): ONNX -> INT8 .rknn,
then optionally the same build in the toolkit's x86 simulator on given frames.

Standalone on purpose: that venv has numpy 1.26 and the toolkit, not npudure. Request: one JSON object
on stdin (onnx, platform, dataset, out, frames, sim_out, result). Result: JSON written to ``result``.
The toolkit prints its own log on stdout; the caller sends it to a file.
"""

import importlib.metadata
import json
import sys
import time
import traceback


def main() -> int:
    request = json.loads(sys.stdin.read())
    result: dict[str, object] = {"ok": False}
    try:
        result = convert(request)
    except Exception as exc:  # reported to the caller as one line; the traceback goes to the log
        traceback.print_exc()
        last = (str(exc).strip().splitlines() or [""])[-1]  # the toolkit wraps its own traceback in the text
        result = {"ok": False, "error": f"rknn-toolkit2: {type(exc).__name__}: {last}"}
    with open(request["result"], "w") as handle:
        json.dump(result, handle)
    return 0 if result.get("ok") else 1


def convert(request: dict) -> dict:
    import numpy as np
    from rknn.api import RKNN

    version = importlib.metadata.version("rknn-toolkit2")
    rknn = RKNN(verbose=False)
    try:
        # The agent sends uint8 NHWC RGB frames: the NPU does the /255 the ONNX graph expects.
        rknn.config(
            mean_values=[[0, 0, 0]],
            std_values=[[255, 255, 255]],
            target_platform=request["platform"],
        )
        started = time.perf_counter()
        steps = (
            ("load_onnx", lambda: rknn.load_onnx(model=request["onnx"])),
            ("build", lambda: rknn.build(do_quantization=True, dataset=request["dataset"])),
            ("export_rknn", lambda: rknn.export_rknn(request["out"])),
        )
        for name, step in steps:
            ret = step()
            if ret != 0:
                return {"ok": False, "error": f"rknn-toolkit2 {version}: {name} returned {ret}"}
        build_seconds = time.perf_counter() - started
        result = {"ok": True, "toolkit_version": version, "build_seconds": build_seconds}
        if request.get("frames"):
            # The x86 simulator only runs a model built in this same session (not a loaded .rknn).
            ret = rknn.init_runtime()
            if ret != 0:
                return {
                    "ok": False,
                    "error": f"rknn-toolkit2 {version}: init_runtime (simulator) returned {ret}",
                }
            frames = np.load(request["frames"])
            arrays = {}
            started = time.perf_counter()
            for i, frame in enumerate(frames):
                outputs = rknn.inference(inputs=[frame[None]], data_format=["nhwc"])
                if outputs is None:
                    return {"ok": False, "error": f"simulator inference returned nothing on frame {i}"}
                for j, out in enumerate(outputs):
                    arrays[f"f{i}_o{j}"] = np.asarray(out, dtype=np.float32)
            result["sim_seconds_per_frame"] = (time.perf_counter() - started) / max(len(frames), 1)
            result["sim_outputs"] = len(outputs) if len(frames) else 0
            # float32 only; compressed: dequantised INT8 takes few distinct values (50+ frames are kept)
            np.savez_compressed(request["sim_out"], allow_pickle=False, **arrays)
        return result
    finally:
        rknn.release()


if __name__ == "__main__":
    sys.exit(main())
