"""The frame and what comes out of the model: frame size/validation/decoding, YOLOv8 post-processing."""
