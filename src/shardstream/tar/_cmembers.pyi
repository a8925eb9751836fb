# The compiled fast path of the tar reader (_cmembers.c): what it takes and returns.
from typing import Any

def plain_members(
    buf: bytearray | bytes | memoryview, start: int, end: int, base: int, threshold: int, limit: int, /
) -> tuple[list[tuple[str, bytes, int]], int]: ...
def group_members(
    members: list[tuple[str, bytes, int]],
    i: int,
    sample: dict[str, Any] | None,
    key: str | None,
    start: int,
    url: str,
    local_path: str | None,
    lcase: bool,
    suffixes: Any,
    /,
) -> tuple[list[tuple[dict[str, Any], int, int, str]], int, dict[str, Any] | None, str | None, int]: ...
