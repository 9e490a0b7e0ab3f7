"""Run ultralytics' own predictor on an ONNX file and images; print its detections as JSON.

Runs INSIDE a virtualenv that has ultralytics (and torch), never npudure's: the parity test starts
it as a subprocess (``$NPUDURE_ULTRALYTICS_PYTHON ultralytics_predict.py REQUEST.json``). Standalone:
it imports nothing from npudure.
"""

import json
import os
import sys


def main() -> int:
    with open(sys.argv[1]) as handle:
        request = json.load(handle)
    os.environ.setdefault("YOLO_OFFLINE", "1")
    import ultralytics
    from ultralytics import YOLO

    model = YOLO(request["onnx"], task="detect")
    results = {}
    for image in request["images"]:
        (r,) = model.predict(
            source=image,
            imgsz=request["imgsz"],
            conf=request["conf"],
            iou=request["iou"],
            max_det=300,
            device="cpu",
            verbose=False,
        )
        results[image] = {
            "xyxy": r.boxes.xyxy.tolist(),
            "conf": r.boxes.conf.tolist(),
            "cls": r.boxes.cls.tolist(),
            "names": [r.names[int(c)] for c in r.boxes.cls.tolist()],
        }
    print(json.dumps({"ultralytics": ultralytics.__version__, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
