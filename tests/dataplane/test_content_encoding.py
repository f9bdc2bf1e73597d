"""Compressed request bodies: gzip and deflate (zlib or raw) read back, anything else
refused, and a body that inflates past the limit refused before it is held whole."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from collections.abc import Callable

import pytest

from deepedge.core.errors import (
    BadRequestError,
    DeepEdgeError,
    RequestTooLargeError,
    UnsupportedMediaTypeError,
)
from deepedge.dataplane.content_encoding import decode_body

BODY = b'{"inputs": []}' * 1000


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(("encoding", "pack"), [
    (None, lambda b: b),
    ("identity", lambda b: b),
    ("gzip", gzip.compress),
    ("GZip", gzip.compress),  # (codings are case-insensitive)
    ("deflate", zlib.compress),  # HTTP's deflate is the zlib format (tritonclient's)
    ("deflate", _raw_deflate),  # some clients send it raw
])  # fmt: skip
def test_every_encoding_reads_back_the_body(
    encoding: str | None, pack: Callable[[bytes], bytes]
) -> None:
    assert decode_body(pack(BODY), encoding, limit_bytes=len(BODY)) == BODY


REFUSED = {
    "an unknown coding": (BODY, "br", UnsupportedMediaTypeError, 415, "'br'"),
    "two codings": (gzip.compress(zlib.compress(BODY)), "deflate, gzip",
                    UnsupportedMediaTypeError, 415, "deflate, gzip"),
    "not gzip": (b"not gzip at all", "gzip", BadRequestError, 400, "not valid gzip"),
    "cut short": (gzip.compress(BODY)[:-12], "gzip", BadRequestError, 400, "ends before"),
    "bytes after": (gzip.compress(BODY) + b"tail", "gzip", BadRequestError, 400, "follow"),
}  # fmt: skip


@pytest.mark.parametrize(("body", "encoding", "error", "status", "words"),
                         list(REFUSED.values()), ids=list(REFUSED))  # fmt: skip
def test_a_body_its_encoding_does_not_describe_is_refused(
    body: bytes, encoding: str, error: type[DeepEdgeError], status: int, words: str
) -> None:
    with pytest.raises(error) as caught:
        decode_body(body, encoding, limit_bytes=len(BODY))
    assert caught.value.http_status == status and words in caught.value.message


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_zip_bomb_is_413_without_inflating_it(encoding: str) -> None:
    """64 MiB of zeros (about 64 KiB compressed) against a 4 MiB limit: refused, and
    the decoder never holds much more than the limit."""
    bomb_bytes, limit_bytes = 64 << 20, 4 << 20
    packer = gzip.compress if encoding == "gzip" else zlib.compress
    bomb = packer(bytes(bomb_bytes))
    assert len(bomb) < bomb_bytes // 500
    tracemalloc.start()
    try:
        with pytest.raises(RequestTooLargeError):
            decode_body(bomb, encoding, limit_bytes)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_bytes < 3 * limit_bytes, peak_bytes


def test_a_body_one_byte_past_the_limit_is_413_and_at_it_passes() -> None:
    assert decode_body(gzip.compress(BODY), "gzip", limit_bytes=len(BODY)) == BODY
    with pytest.raises(RequestTooLargeError) as caught:
        decode_body(gzip.compress(BODY), "gzip", limit_bytes=len(BODY) - 1)
    assert caught.value.http_status == 413 and "limit of" in caught.value.message
