"""Seeded synthetic camera-like frames: the same seed gives the same frame on every machine.

Used to calibrate the untrained YOLOv8n (BatchNorm statistics, class bias, INT8 ranges), in tests,
and by the bench as "real frames from a fixed seed". Pure integer-seeded numpy, no image files.
"""

from __future__ import annotations

import numpy as np

FRAME_SIZE = 640


def synthetic_frame(seed: int, size: int = FRAME_SIZE) -> np.ndarray:
    """A ``size`` x ``size`` x 3 uint8 RGB frame: sky/ground gradients, coloured shapes and sensor noise."""
    rng = np.random.default_rng([0x6E707564, seed])  # namespaced so frame seeds never alias model seeds
    rows = np.linspace(0.0, 1.0, size, dtype=np.float32)[:, None, None]
    cols = np.linspace(0.0, 1.0, size, dtype=np.float32)[None, :, None]

    # Two vertical gradients split at a horizon, with a slight horizontal tilt.
    sky_top, sky_low, ground_top, ground_low = rng.uniform(0, 255, (4, 3)).astype(np.float32)
    horizon = int(rng.uniform(0.3, 0.7) * size)
    img = np.empty((size, size, 3), dtype=np.float32)
    t = rows[:horizon] / max(rows[horizon - 1, 0, 0], 1e-6)
    img[:horizon] = sky_top * (1 - t) + sky_low * t
    t = (rows[horizon:] - rows[horizon, 0, 0]) / max(1.0 - rows[horizon, 0, 0], 1e-6)
    img[horizon:] = ground_top * (1 - t) + ground_low * t
    img += (cols - 0.5) * rng.uniform(-40, 40)

    yy, xx = np.mgrid[0:size, 0:size]
    # Rectangles ("vehicles", "buildings"), some with a shaded face.
    for _ in range(int(rng.integers(3, 9))):
        w, h = (rng.uniform(0.05, 0.35, 2) * size).astype(int)
        x0, y0 = int(rng.integers(0, size - w)), int(rng.integers(0, size - h))
        colour = rng.uniform(0, 255, 3).astype(np.float32)
        shade = rng.uniform(-60, 60) * np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
        img[y0 : y0 + h, x0 : x0 + w] = colour + shade
    # Ellipses ("people", "balls").
    for _ in range(int(rng.integers(1, 5))):
        cx, cy = rng.uniform(0.1, 0.9, 2) * size
        rx, ry = rng.uniform(0.02, 0.15, 2) * size
        y0, y1 = max(int(cy - ry), 0), min(int(cy + ry) + 1, size)
        x0, x1 = max(int(cx - rx), 0), min(int(cx + rx) + 1, size)
        inside = ((xx[y0:y1, x0:x1] - cx) / rx) ** 2 + ((yy[y0:y1, x0:x1] - cy) / ry) ** 2 <= 1.0
        img[y0:y1, x0:x1][inside] = rng.uniform(0, 255, 3).astype(np.float32)

    img += rng.normal(0.0, 6.0, img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)
