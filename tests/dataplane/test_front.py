"""The front application's answers: server-wide documents, a served model whose application
is not up yet answered 503 starting to its own key (with ``Retry-After``), and another
tenant's model answered exactly as a model that does not exist."""

from __future__ import annotations

import pytest

from deepedge.core.errors import (
    DataPlaneStartingError,
    DeepEdgeError,
    ForbiddenError,
    NotFoundError,
    UnauthorizedError,
)
from deepedge.dataplane.front import front_answer, model_of
from deepedge.dataplane.keys import KeyGrant, key_digest
from deepedge.dataplane.protocol import STARTING, error_body, error_headers

ALICE_CAM, ALICE_DOOR, BOB_CAM = "dpk_alice_cam", "dpk_alice_door", "dpk_bob_cam"
KEYS = {
    key_digest(ALICE_CAM): KeyGrant("d-cam", "alice"),
    key_digest(ALICE_DOOR): KeyGrant("d-door", "alice"),
    key_digest(BOB_CAM): KeyGrant("d-bob", "bob"),
}
OWNERS = {"alice.cam": KeyGrant("d-cam", "alice"), "bob.cam": KeyGrant("d-bob", "bob")}


def _answer(path: str, key: str | None, method: str = "GET") -> tuple[int, bytes, dict[str, str]]:
    """What the front application sends: status, body and headers."""
    authorization = None if key is None else f"Bearer {key}"
    try:
        front_answer(path, method, authorization, KEYS, OWNERS)
    except DeepEdgeError as exc:
        return exc.http_status, error_body(exc.message), error_headers(exc) or {}
    return 200, b"", {}


@pytest.mark.parametrize(
    ("path", "model"),
    [("/v2/models/alice.cam", "alice.cam"), ("/v2/models/alice.cam/infer", "alice.cam"),
     ("/v2/models/alice.cam/versions/2/ready", "alice.cam"), ("/v2/models/", None),
     ("/v2/models", None), ("//v2/models/alice.cam/infer", None), ("/", None),
     ("/v2/health/ready", None)],
)  # fmt: skip
def test_the_model_a_path_names_is_its_route_prefix(path: str, model: str | None) -> None:
    assert model_of(path) == model


@pytest.mark.parametrize(
    "path",
    ["/v2/models/alice.cam/infer", "/v2/models/alice.cam/ready", "/v2/models/alice.cam",
     "/v2/models/alice.cam/versions/1/ready", "/v2/models/alice.cam/versions/1/infer"],
)  # fmt: skip
def test_a_served_model_not_up_yet_is_a_503_starting_to_its_own_key(path: str) -> None:
    method = "POST" if path.endswith("/infer") else "GET"
    with pytest.raises(DataPlaneStartingError) as caught:
        front_answer(path, method, f"Bearer {ALICE_CAM}", KEYS, OWNERS)
    assert caught.value.http_status == 503
    assert error_headers(caught.value) == {"Retry-After": "1"}
    assert error_body(caught.value.message) == b'{"error":"' + STARTING.encode() + b'"}'


@pytest.mark.parametrize(
    ("key", "error"),
    [(None, UnauthorizedError), ("dpk_revoked", UnauthorizedError),
     (BOB_CAM, NotFoundError), (ALICE_DOOR, ForbiddenError)],
)  # fmt: skip
def test_any_other_key_gets_what_the_models_application_would_answer(
    key: str | None, error: type[DeepEdgeError]
) -> None:
    with pytest.raises(error) as caught:
        front_answer("/v2/models/alice.cam/infer", "POST",
                     None if key is None else f"Bearer {key}", KEYS, OWNERS)  # fmt: skip
    assert type(caught.value) is error


@pytest.mark.parametrize("key", [None, "dpk_revoked", BOB_CAM])
@pytest.mark.parametrize(
    "suffix", ["/infer", "/ready", "", "/versions/1/ready", "/versions/1", "/config"]
)
def test_another_tenants_starting_model_answers_as_one_that_does_not_exist(
    key: str | None, suffix: str
) -> None:
    method = "POST" if suffix.endswith("/infer") else "GET"
    theirs = _answer(f"/v2/models/alice.cam{suffix}", key, method)
    nobody = _answer(f"/v2/models/alice.nothing{suffix}", key, method)
    assert theirs == nobody and theirs[0] in (401, 404)


def test_server_wide_documents_need_no_key_and_unserved_paths_are_json_404s() -> None:
    assert front_answer("/v2/health/ready", "GET", None, KEYS, OWNERS) == {"ready": True}
    for path in ("/", "//v2/models/alice.cam/infer", "/v2/models/", "/v2/models/x.y/infer"):
        assert _answer(path, BOB_CAM) == (404, b'{"error":"unknown model"}', {})
