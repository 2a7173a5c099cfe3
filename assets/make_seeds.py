"""Draw the seed scribbles used by ``examples/segment_tsukuba.py`` and write them as PNGs.

Run from anywhere: ``python assets/make_seeds.py``. Each PNG is 8-bit gray with values 0 (unknown),
1 (object) and 2 (background), the labels of :func:`torchcut.segment`. The strokes are polylines in
the pixel coordinates (x, y) of the full-size images: Tsukuba's left view (384x288), where the object
is the orange desk lamp (shade, neck and arm), and scikit-image's ``astronaut`` (512x512), where
the object is the astronaut (hair, face and suit; the flag, shuttle and helmet are background).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent

# name -> (width, height, object strokes, background strokes); a stroke is (width_px, [(x, y), ...])
SCRIBBLES = {
    "tsukuba_seeds.png": (
        384,
        288,
        [
            (5, [(247, 104), (232, 135), (218, 166)]),  # down the lamp shade
            (5, [(207, 166), (258, 166)]),  # across the shade's lower half
            (3, [(255, 138), (284, 143)]),  # the neck joining the shade to the arm
        ],
        [
            (4, [(172, 84), (290, 84), (380, 84)]),  # shelf above the lamp
            (4, [(168, 140), (168, 240)]),  # the plaster head, left of the lamp
            (4, [(190, 215), (345, 215)]),  # table under the lamp
            (4, [(300, 164), (300, 190)]),  # the can under the lamp's arm
            (4, [(80, 140), (110, 140)]),  # orange things on the left shelf
            (4, [(383, 2), (2, 2), (2, 285), (383, 285)]),  # top, left and bottom borders
            (3, [(298, 95), (298, 118)]),  # the yellow bottle
            (4, [(350, 30), (350, 125)]),  # the poster
            (4, [(360, 195), (360, 260)]),  # right of the table
        ],
    ),
    "astronaut_seeds.png": (
        512,
        512,
        [
            (6, [(190, 50), (260, 45)]),  # hair
            (6, [(205, 100), (225, 125), (230, 160)]),  # face
            (6, [(230, 150), (220, 195), (228, 240), (235, 290)]),  # chin, collar, neck ring, chest
            (6, [(90, 300), (200, 330), (320, 310)]),  # suit, chest
            (6, [(100, 380), (230, 420)]),  # suit and patch
            (6, [(60, 420), (130, 480)]),  # suit, arm
        ],
        [
            (6, [(150, 5), (350, 5)]),  # backdrop, top
            (6, [(120, 40), (135, 170)]),  # backdrop, left of the head
            (6, [(310, 50), (335, 200)]),  # backdrop, right of the head
            (6, [(40, 30), (55, 220)]),  # flag
            (5, [(8, 300), (8, 500)]),  # flag, lower left
            (6, [(395, 60), (400, 250)]),  # shuttle
            (6, [(418, 10), (420, 110)]),  # shuttle's external tank
            (6, [(20, 60), (75, 230)]),  # flag, stripes
            (4, [(3, 80), (3, 290)]),  # flag, left edge
            (6, [(330, 380), (360, 445), (420, 500)]),  # helmet and its reflection
            (6, [(480, 50), (490, 250)]),  # backdrop, right
            (6, [(420, 305), (500, 310)]),  # table
            (6, [(380, 420), (470, 470)]),  # helmet
        ],
    ),
}


def draw(width: int, height: int, obj, bkg) -> np.ndarray:
    """Rasterize the strokes: a uint8 ``[height, width]`` array of labels 0, 1, 2."""
    canvas = Image.new("L", (width, height), 0)
    pen = ImageDraw.Draw(canvas)
    for label, strokes in ((2, bkg), (1, obj)):
        for w, pts in strokes:
            pen.line(pts, fill=label, width=w, joint="curve")
    return np.asarray(canvas, dtype=np.uint8).copy()


def main() -> None:
    for name, (w, h, obj, bkg) in SCRIBBLES.items():
        seeds = draw(w, h, obj, bkg)
        Image.fromarray(seeds, mode="L").save(HERE / name, optimize=True)
        counts = np.bincount(seeds.ravel(), minlength=3)
        print(f"wrote {HERE / name}: {counts[1]} object, {counts[2]} background seed pixels")


if __name__ == "__main__":
    main()
