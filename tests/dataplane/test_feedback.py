"""Feedback bodies: one label or a batch, each named by the server's request_id or the
client's own id, every entry checked before anything is written."""

from __future__ import annotations

import json

import pytest

from deepedge.core.errors import BadRequestError, DeepEdgeError, InvalidInputError
from deepedge.dataplane.feedback import parse_feedback, unknown_error
from deepedge.dataplane.sample_store import Feedback

CLASSES = ("cat", "dog", "bird")


def _body(document: object) -> bytes:
    return json.dumps(document).encode()


@pytest.mark.parametrize(("document", "parsed"), [
    ({"request_id": "r1", "label": 2}, (Feedback(2, request_id="r1"),)),
    ({"id": "cam-7", "label": "dog"}, (Feedback(1, client_id="cam-7"),)),
    ({"request_id": "r1", "id": "cam-7", "label": 0}, (Feedback(0, request_id="r1"),)),
    ({"labels": [{"request_id": "r1", "label": 0}, {"id": "c2", "label": "bird"}]},
     (Feedback(0, request_id="r1"), Feedback(2, client_id="c2"))),
])  # fmt: skip
def test_entries_name_their_request_by_either_id(
    document: object, parsed: tuple[Feedback, ...]
) -> None:
    assert parse_feedback(_body(document), CLASSES) == parsed


@pytest.mark.parametrize(("body", "error", "words"), [
    (b"{oops", BadRequestError, "not JSON"),
    (_body([]), BadRequestError, "labels"),
    (_body({"labels": []}), BadRequestError, "labels"),
    (_body({"label": 1}), BadRequestError, "request_id or the request's id"),
    (_body({"id": 7, "label": 1}), BadRequestError, "labels[0].id"),
    (_body({"request_id": "", "label": 1}), BadRequestError, "labels[0].request_id"),
    (_body({"labels": [{"request_id": "r1", "label": 1}, "r2"]}), BadRequestError, "labels[1]"),
    (_body({"request_id": "r1", "label": 3}), InvalidInputError, "not one of the model's 3"),
    (_body({"request_id": "r1", "label": "fish"}), InvalidInputError, "'fish'"),
    (_body({"request_id": "r1", "label": True}), InvalidInputError, "True"),
])  # fmt: skip
def test_a_bad_entry_refuses_the_whole_body(
    body: bytes, error: type[DeepEdgeError], words: str
) -> None:
    with pytest.raises(error) as caught:
        parse_feedback(body, CLASSES)
    assert words in caught.value.message and caught.value.http_status in {400, 422}


def test_the_404_names_the_unknown_requests_and_says_nothing_was_written() -> None:
    error = unknown_error([f"r{i}" for i in range(7)])
    assert error.http_status == 404
    assert "r0, r1, r2, r3, r4 (and 2 more)" in error.message
    assert "nothing was labelled" in error.message
    assert error.fields["unknown"] == [f"r{i}" for i in range(7)]
