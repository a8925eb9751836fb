"""A prefix of small single-object samples in a test bucket (shared by the tests and their
spawned rank processes, which cannot import a ``conftest``)."""

from __future__ import annotations

from dataclasses import dataclass

from _servers import SeaweedS3


@dataclass
class Prefix:
    """A prefix of ``n`` samples ``{i:05d}.txt`` + ``{i:05d}.cls`` under ``url``."""

    url: str
    bucket: str
    prefix: str
    n: int
    s3: SeaweedS3

    def key(self, i: int) -> str:
        return f"{i:05d}"

    def expected(self, i: int) -> dict[str, bytes]:
        return {"txt": f"text of sample {i} ".encode() * (1 + i % 7), "cls": str(i % 10).encode()}


def fill(s3: SeaweedS3, bucket: str, prefix: str, n: int) -> Prefix:
    p = Prefix(f"s3://{bucket}/{prefix}", bucket, prefix, n, s3)
    client = s3.client()
    for i in range(n):
        for ext, data in p.expected(i).items():
            client.put_object(Bucket=bucket, Key=f"{prefix}{p.key(i)}.{ext}", Body=data)
    return p
