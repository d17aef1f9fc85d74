from typing_extensions import Buffer

class UnsupportedError(ValueError): ...

# Per column: (validity bitmap or None, null count, values) or (validity, null count, offsets, data).
Columns = dict[str, tuple[bytearray | None, int, bytearray] | tuple[bytearray | None, int, bytearray, bytearray]]

def find_events(document: Buffer, /) -> int: ...
def scan(
    data: Buffer, start: int, end: int, max_bytes: int, first_index: int, device_categories: tuple[bytes, ...], /
) -> tuple[int, int, list[tuple[int, Columns]], bool]: ...
