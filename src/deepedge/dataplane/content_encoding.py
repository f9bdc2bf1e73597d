"""Request bodies compressed by the client (``Content-Encoding``), read within a bound.

tritonclient compresses a request body when asked (``request_compression_algorithm``:
``gzip``, or ``deflate``, which HTTP means as the zlib format; a raw deflate stream is read
too). A compressed body is inflated in steps, each asking for no more than what is left of
``limit_bytes``: a body that would inflate past the limit (a zip bomb: a few kilobytes of
zeros that inflate to gigabytes) is refused with a 413 as soon as the limit is passed,
having held no more than the limit in memory. The limit is the same as for an
uncompressed body (:func:`~deepedge.dataplane.protocol.body_limit`), and it bounds the body
as the protocol reads it (``Inference-Header-Content-Length`` counts inflated bytes).

Pure: bytes in, bytes out.
"""

from __future__ import annotations

import zlib

from deepedge.core.errors import BadRequestError, RequestTooLargeError, UnsupportedMediaTypeError

ENCODINGS = ("gzip", "deflate", "identity")
CHUNK_BYTES = 1 << 20  # inflated per step at most
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = zlib.MAX_WBITS
_RAW_WBITS = -zlib.MAX_WBITS


def decode_body(body: bytes, content_encoding: str | None, limit_bytes: int) -> bytes:
    """The body as sent before the client compressed it; ``body`` itself when it names no
    encoding (or ``identity``). Raises :class:`UnsupportedMediaTypeError` (415) for another
    encoding, :class:`RequestTooLargeError` (413) past ``limit_bytes`` inflated, and
    :class:`BadRequestError` (400) for a body that is not what its encoding says."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return body
    if len(codings) > 1 or codings[0] not in ENCODINGS:
        raise UnsupportedMediaTypeError(
            f"Content-Encoding {content_encoding!r} is not read here; send gzip, deflate or "
            "an uncompressed body",
            field="Content-Encoding",
        )
    coding = codings[0]
    if coding == "gzip":
        return _inflate(body, _GZIP_WBITS, coding, limit_bytes)
    # "deflate" is the zlib format (RFC 9110); some clients send a raw deflate stream
    raw = len(body) < 2 or (body[0] & 0x0F) != 8 or ((body[0] << 8) | body[1]) % 31 != 0
    return _inflate(body, _RAW_WBITS if raw else _ZLIB_WBITS, coding, limit_bytes)


def _inflate(body: bytes, wbits: int, coding: str, limit_bytes: int) -> bytes:
    inflater = zlib.decompressobj(wbits)
    parts: list[bytes] = []
    size = 0
    pending = body
    try:
        while True:
            room = limit_bytes - size
            part = inflater.decompress(pending, min(CHUNK_BYTES, room + 1))
            size += len(part)
            if size > limit_bytes:
                raise RequestTooLargeError(
                    f"the {coding} request body inflates past this model's limit of "
                    f"{limit_bytes} bytes",
                    field="body",
                )
            parts.append(part)
            pending = inflater.unconsumed_tail
            if inflater.eof or (not pending and not part):
                break
    except zlib.error as exc:
        raise BadRequestError(f"the request body is not valid {coding}: {exc}") from exc
    if not inflater.eof:
        raise BadRequestError(f"the {coding} request body ends before its stream does")
    if inflater.unused_data:
        raise BadRequestError(f"bytes follow the {coding} stream of the request body")
    return b"".join(parts)
