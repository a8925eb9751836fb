# The compiled fast path of the tar reader (_cmembers.c): what it takes and returns.

def plain_members(
    buf: bytearray | bytes | memoryview, start: int, end: int, base: int, threshold: int, limit: int, /
) -> tuple[list[tuple[str, bytes, int]], int]: ...
