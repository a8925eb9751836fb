"""Writing ``s3://`` objects: a streamed multipart upload that is all-or-nothing.

Used through :meth:`~shardstream.sources.s3.S3Source.create`; it calls the source's botocore
client directly and maps failures with the source's ``translate``.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import SourceError
from ._s3_errors import cause
from .base import PartedWriter

__all__ = ["S3Writer", "UploadTarget"]

_Bytes = bytes | bytearray | memoryview


class UploadTarget(Protocol):
    """What an :class:`S3Writer` needs of its source (an :class:`~.s3.S3Source`)."""

    @property
    def client(self) -> Any:
        """The botocore client."""
        ...

    @property
    def part_size(self) -> int:
        """Bytes per uploaded part."""
        ...

    def translate(self, exc: BaseException, url: str, action: str = "open") -> SourceError:
        """The shardstream error for a botocore or network exception."""
        ...


class S3Writer(PartedWriter):
    """A write-only stream that uploads to S3 in parts of ``source.part_size`` bytes.

    At most one part is held in memory. An object smaller than one part is sent with a single
    ``PutObject`` on close. Leaving a ``with`` block by an exception (or calling :meth:`abort`)
    aborts the upload, so no partial object ever becomes visible.
    """

    def __init__(self, source: UploadTarget, url: str, bucket: str, key: str) -> None:
        super().__init__()
        self._source = source
        self.url = url
        self._bucket = bucket
        self._key = key
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self.size = 0

    def _call(self, name: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._source.client, name)(Bucket=self._bucket, Key=self._key, **kwargs)
        except Exception as exc:
            raise self._source.translate(exc, self.url, action="write") from cause(exc)

    def _upload_part(self, data: _Bytes) -> None:
        if self._upload_id is None:
            self._upload_id = self._call("create_multipart_upload")["UploadId"]
        number = len(self._parts) + 1
        result = self._call("upload_part", UploadId=self._upload_id, PartNumber=number, Body=bytes(data))
        self._parts.append({"PartNumber": number, "ETag": result["ETag"]})

    def _part_size(self) -> int:
        return self._source.part_size

    def _send_part(self, size: int) -> None:
        self._upload_part(memoryview(self._buffer)[:size])
        del self._buffer[:size]

    def _finish(self) -> None:
        """Upload what is buffered and complete the upload; the object is visible afterwards."""
        if self._upload_id is None:
            self._call("put_object", Body=bytes(self._buffer))
            return
        if self._buffer:
            self._upload_part(self._buffer)
        self._call(
            "complete_multipart_upload",
            UploadId=self._upload_id,
            MultipartUpload={"Parts": self._parts},
        )

    def abort(self) -> None:
        """Discard everything written; nothing becomes visible."""
        upload, self._upload_id = self._upload_id, None
        self._buffer = bytearray()
        if upload is not None:
            try:
                self._source.client.abort_multipart_upload(
                    Bucket=self._bucket, Key=self._key, UploadId=upload
                )
            except Exception:  # best effort: a lifecycle rule cleans up what remains
                pass
        if not self.closed:
            self._close_unpublished()
