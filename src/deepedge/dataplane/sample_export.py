"""A deployment's stored samples as one NPZ archive (``numpy.load`` reads it back).

The archive holds one array per field, row ``i`` of each describing the same sample, oldest
first (by the time it was served):

===============  =========  ===========================================================
``inputs``       (N, ...)   the inputs as the camera sent them (the data plane's dtype)
``request_id``   (N,) str   the server's request id (feedback and deletion name it)
``client_id``    (N,) str   the request's own ``id``, ``""`` when it gave none
``at``           (N,) f8    when it was served, seconds since the epoch
``version``      (N,) i8    the model version that answered
``route``        (N,) str   ``serving``, ``canary`` or ``pinned``
``prediction``   (N,) i8    the class it answered
``label``        (N,) i8    its label, ``-1`` while it has none
``label_source`` (N,) str   ``feedback``, ``golden``, ... ; ``""`` while it has no label
``labelled_at``  (N,) f8    when it was labelled, NaN while it has no label
===============  =========  ===========================================================

A deployment's inputs share one shape and dtype (its model's signature); should they not,
``inputs`` is left out and each input is its own array, ``input_<i>``. Nothing in the
archive needs ``allow_pickle``.

Everything is read from one snapshot of the store (:meth:`SampleStore.snapshot`), so the
count announced before the first byte is the count written, and streamed: the archive is
written as it is sent, with a sample's input in memory at a time (the other fields, a few
numbers per sample, are read first).
"""

from __future__ import annotations

import io
import json
import sqlite3
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack

import numpy as np

from deepedge.dataplane.sample_selection import SampleSelection
from deepedge.dataplane.sample_store import SampleStore

MEDIA_TYPE = "application/octet-stream"
SUFFIX = ".npz"
CHUNK_BYTES = 1 << 20  # what is gathered before it is handed on
NO_LABEL = -1
_FIELDS = ("request_id", "client_id", "at", "version", "route", "prediction", "label",
           "label_source", "labelled_at")  # fmt: skip


class _Collector(io.RawIOBase):
    """Where the archive is written: a stream without seeking (zipfile then writes each
    member's sizes after it), whose bytes are taken as they come."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        part = bytes(data)
        self._parts.append(part)
        self.size += len(part)
        return len(part)

    def take(self) -> bytes:
        taken, self._parts, self.size = b"".join(self._parts), [], 0
        return taken


class SampleExport:
    """The samples of ``deployment`` that ``selection`` names, from one snapshot: their
    ``count`` at once, then the archive's bytes (:meth:`chunks`). Call :meth:`close` if the
    chunks are not read to the end."""

    def __init__(self, store: SampleStore, deployment: str, selection: SampleSelection) -> None:
        self._stack = ExitStack()
        self._conn: sqlite3.Connection = self._stack.enter_context(store.snapshot())
        self._where, self._params = selection.where(deployment)
        try:
            count, kinds, dtype, shape = self._conn.execute(
                "SELECT COUNT(*), COUNT(DISTINCT dtype || shape), MIN(dtype), MIN(shape) "
                f"FROM samples WHERE {self._where}",
                self._params,
            ).fetchone()
        except BaseException:
            self.close()
            raise
        self.count = int(count)
        # one shape and dtype for all (or none at all): one stacked array
        self._stacked = None if kinds > 1 else (
            (np.dtype(dtype), tuple(json.loads(shape))) if count else (np.dtype("<f4"), (0,))
        )  # fmt: skip

    def close(self) -> None:
        self._stack.close()

    def chunks(self, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
        """The archive, in parts of about ``chunk_bytes`` (the snapshot is closed after the
        last, or when the caller closes the iterator)."""
        try:
            sink = _Collector()
            with zipfile.ZipFile(sink, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
                for name, array in self._fields().items():
                    archive.writestr(f"{name}.npy", _npy(array))
                yield sink.take()  # (the fields: a few numbers per sample)
                inputs = "SELECT dtype, shape, input FROM samples WHERE {} ORDER BY at, seq"
                rows = self._conn.execute(inputs.format(self._where), self._params)
                if self._stacked is not None:
                    yield from self._stacked_inputs(archive, sink, rows, chunk_bytes)
                else:
                    for i, (dtype, shape, blob) in enumerate(rows):
                        array = np.frombuffer(blob, np.dtype(dtype)).reshape(json.loads(shape))
                        archive.writestr(f"input_{i}.npy", _npy(array))
                        if sink.size >= chunk_bytes:
                            yield sink.take()
            if sink.size:
                yield sink.take()
        finally:
            self.close()

    def _stacked_inputs(
        self,
        archive: zipfile.ZipFile,
        sink: _Collector,
        rows: sqlite3.Cursor,
        chunk_bytes: int,
    ) -> Iterator[bytes]:
        """``inputs.npy``: its header, then each input's bytes in turn (C order, as
        stored)."""
        assert self._stacked is not None
        dtype, shape = self._stacked
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                  "shape": (self.count, *shape) if self.count else (0,)}  # fmt: skip
        with archive.open("inputs.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(member, header)
            for _, _, blob in rows:
                member.write(blob)
                if sink.size >= chunk_bytes:
                    yield sink.take()

    def _fields(self) -> dict[str, np.ndarray]:
        """Every field but the inputs, one array each (``None`` in the store: ``""``, -1,
        NaN)."""
        rows = self._conn.execute(
            f"SELECT {', '.join(_FIELDS)} FROM samples WHERE {self._where} ORDER BY at, seq",
            self._params,
        ).fetchall()
        columns = list(zip(*rows, strict=True)) if rows else [()] * len(_FIELDS)
        raw = dict(zip(_FIELDS, columns, strict=True))

        def text(name: str) -> np.ndarray:
            return np.array([v or "" for v in raw[name]], dtype=str)

        def numbers(name: str, dtype: type[np.generic], missing: float) -> np.ndarray:
            return np.array([missing if v is None else v for v in raw[name]], dtype=dtype)

        return {
            "request_id": text("request_id"),
            "client_id": text("client_id"),
            "at": numbers("at", np.float64, np.nan),
            "version": numbers("version", np.int64, NO_LABEL),
            "route": text("route"),
            "prediction": numbers("prediction", np.int64, NO_LABEL),
            "label": numbers("label", np.int64, NO_LABEL),
            "label_source": text("label_source"),
            "labelled_at": numbers("labelled_at", np.float64, np.nan),
        }


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def export_bytes(store: SampleStore, deployment: str, selection: SampleSelection) -> bytes:
    """The whole archive at once (tests, small exports)."""
    return b"".join(SampleExport(store, deployment, selection).chunks())
