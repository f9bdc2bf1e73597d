"""Part 4 of the Ekya benchmark validates the digits on the stream's validation part."""

import numpy as np

from deepedge.bench.ekya_microprofile import _digits


def test_digits_validation_images_come_from_the_validation_part() -> None:
    setting = _digits(quick=True, seed=0)
    window = setting.window(3)
    assert window.validation is not None
    images, labels = window.validation(40)
    assert images.shape[0] == labels.shape[0] == 40
    # Not a share of the window's own (training) images: none of them appears in the window.
    pool = {img.tobytes() for img in window.images}
    assert not any(img.tobytes() in pool for img in images)
    # Deterministic in the window: the same draw twice.
    again, _ = window.validation(40)
    assert np.array_equal(images, again)
