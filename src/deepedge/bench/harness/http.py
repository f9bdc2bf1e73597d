"""The benchmarks' HTTP client of a service on loopback: the API with a bearer token, a
deployment's inference key and its routes, and polling until something holds."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

log = logging.getLogger(__name__)


def bearer(token: str) -> dict[str, str]:
    """The ``Authorization`` header of ``token``."""
    return {"Authorization": f"Bearer {token}"}


class Client:
    """The service's API as one tenant (or the operator) sees it: JSON in and out, an error
    status raised (a POST's with the answer's first 300 characters)."""

    def __init__(self, url: str, token: str, timeout_s: float = 60.0) -> None:
        self.http = httpx.Client(base_url=url, headers=bearer(token), timeout=timeout_s,
                                 trust_env=False)  # fmt: skip

    def get(self, path: str) -> Any:
        response = self.http.get(path)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, body: Any) -> Any:
        response = self.http.post(path, json=body)
        if response.status_code >= 400:
            raise RuntimeError(f"POST {path}: {response.status_code} {response.text[:300]}")
        return response.json()

    def close(self) -> None:
        self.http.close()


@dataclass(frozen=True)
class InferenceKey:
    """A deployment's inference key as ``POST /v1/deployments/NAME/keys`` answers it: the
    model's OIP route (``endpoint``, ``.../v2/models/MODEL``), the model's name, the key."""

    endpoint: str
    model: str
    key: str

    @classmethod
    def of(cls, answer: Mapping[str, Any]) -> InferenceKey:
        return cls(str(answer["endpoint"]), str(answer["model"]), str(answer["key"]))

    @property
    def base_url(self) -> str:
        """The data plane's URL, before ``/v2/``."""
        return self.endpoint.split("/v2/")[0]

    def route(self, name: str) -> str:
        """The model's ``infer``, ``ready`` or ``feedback`` route."""
        return f"{self.base_url}/v2/models/{self.model}/{name}"

    def auth(self) -> dict[str, str]:
        return bearer(self.key)


def endpoint_ready(key: InferenceKey, timeout_s: float = 5.0) -> bool:
    """Whether the model answers ready; a request held while its replicas start (the
    ingress queues it until they are up) or refused counts as not yet."""
    try:
        answer = httpx.get(f"{key.endpoint}/ready", headers=key.auth(), timeout=timeout_s,
                           trust_env=False)  # fmt: skip
    except httpx.HTTPError:
        return False
    return answer.status_code == 200


def wait_until(what: str, check: Callable[[], bool], timeout_s: float, poll_s: float = 0.5) -> bool:
    """Poll ``check`` until it holds (True) or ``timeout_s`` passes (False, logged)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(poll_s)
    log.warning("gave up waiting for %s after %.0f s", what, timeout_s)
    return False
