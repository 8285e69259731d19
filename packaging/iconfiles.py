"""Write Windows .ico and macOS .icns containers from PNG images, with no extra library.

Both formats may hold PNG-compressed images: an .ico entry whose data starts with the PNG
signature is read by Windows Vista and later, and .icns has had PNG entries since OS X
10.7. So no Pillow and no ``iconutil``: the containers are a header, a table and the PNGs.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

#: ``.icns`` element types with PNG data, and the pixel size of each. The ``@2x`` types
#: (ic11..ic14, ic10) are what Retina displays pick; ``iconutil`` writes the same set.
ICNS_TYPES: dict[str, int] = {
    "icp4": 16, "icp5": 32, "icp6": 64, "ic07": 128, "ic08": 256, "ic09": 512,
    "ic10": 1024, "ic11": 32, "ic12": 64, "ic13": 256, "ic14": 512,
}

#: Sizes packed into the Windows .ico: the shell's small, list, large and jumbo views.
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk; ValueError if ``data`` is not a PNG."""
    if data[:8] != PNG_SIGNATURE or data[12:16] != b"IHDR":
        raise ValueError("not a PNG image (bad signature or no IHDR chunk first)")
    return struct.unpack(">II", data[16:24])


def ico_bytes(pngs: Mapping[int, bytes]) -> bytes:
    """An .ico holding one PNG entry per size (``{size: png data}``, square images)."""
    sizes = sorted(pngs)
    header = struct.pack("<HHH", 0, 1, len(sizes))  # reserved, type 1 = icon, count
    offset = len(header) + 16 * len(sizes)
    table, blobs = b"", b""
    for size in sizes:
        data = pngs[size]
        if png_size(data) != (size, size):
            raise ValueError(f"the PNG given for {size} px is {png_size(data)}")
        if not 1 <= size <= 256:
            raise ValueError(f"an .ico entry is 1 to 256 px; got {size}")
        byte = 0 if size == 256 else size  # 0 means 256 in the one-byte size fields
        table += struct.pack("<BBBBHHII", byte, byte, 0, 0, 1, 32, len(data), offset + len(blobs))
        blobs += data
    return header + table + blobs


def icns_bytes(pngs: Mapping[int, bytes]) -> bytes:
    """An .icns holding every ICNS_TYPES element whose pixel size is in ``pngs``."""
    body = b""
    for kind, size in ICNS_TYPES.items():
        data = pngs.get(size)
        if data is None:
            continue
        if png_size(data) != (size, size):
            raise ValueError(f"the PNG given for {size} px is {png_size(data)}")
        body += kind.encode("ascii") + struct.pack(">I", 8 + len(data)) + data
    if not body:
        raise ValueError(f"no PNG of an .icns size was given ({sorted(set(ICNS_TYPES.values()))})")
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def write_ico(path: Path, pngs: Mapping[int, bytes]) -> None:
    """Write an .ico of the ICO_SIZES present in ``pngs``."""
    path.write_bytes(ico_bytes({s: pngs[s] for s in ICO_SIZES if s in pngs}))


def write_icns(path: Path, pngs: Mapping[int, bytes]) -> None:
    """Write an .icns of the ICNS_TYPES sizes present in ``pngs``."""
    path.write_bytes(icns_bytes(pngs))
