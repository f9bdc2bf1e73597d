"""Dynamic batching's bookkeeping: requests of several versions and sizes in, each
request's own rows back."""

from __future__ import annotations

import numpy as np
import pytest

from deepedge.dataplane.batching import by_version, images_in, scatter


def request(version: int, n: int, tag: float) -> tuple[int, np.ndarray]:
    return version, np.full((n, 2), tag, dtype=np.float32)


@pytest.mark.parametrize(
    "items",
    [
        [request(1, 1, 0.0)],
        [request(1, 1, 0.0), request(2, 3, 1.0), request(1, 2, 2.0), request(2, 1, 3.0)],
        [request(5, 4, 0.0), request(5, 4, 1.0)],
    ],
)
def test_each_request_gets_its_own_rows_of_its_versions_output(
    items: list[tuple[int, np.ndarray]],
) -> None:
    groups = by_version(items)
    assert [g.version for g in groups] == sorted({v for v, _ in items})
    assert sum(len(g.inputs) for g in groups) == images_in(items)
    # each version's "model" tags its rows with the version: x -> [x, version]
    outputs = [np.concatenate([g.inputs[:, :1], np.full((len(g.inputs), 1), g.version)], 1)
               for g in groups]  # fmt: skip
    answers = scatter(groups, outputs, len(items))
    for (version, x), answer in zip(items, answers, strict=True):
        assert answer.shape == (len(x), 2)
        np.testing.assert_array_equal(answer[:, 0], x[:, 0])
        assert (answer[:, 1] == version).all()


def test_a_short_output_is_refused() -> None:
    groups = by_version([request(1, 2, 0.0)])
    with pytest.raises(ValueError, match="gave 1 rows for 2 images"):
        scatter(groups, [np.zeros((1, 2))], 1)
