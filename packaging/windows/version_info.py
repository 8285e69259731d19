"""The Windows version resource of Parley.exe, made from pyproject.toml's version.

PyInstaller reads a version file as one Python expression built from the classes in
``PyInstaller.utils.win32.versioninfo`` (which needs ``pefile``, present on Windows
only). ``version_info_text`` writes that expression as text, so it can be generated and
checked on any platform; ``packaging/parley.spec`` writes it into the build folder and
passes the file to EXE(version=...).
"""

from __future__ import annotations

import re


def version_tuple(version: str) -> tuple[int, int, int, int]:
    """``"0.1.0"`` -> ``(0, 1, 0, 0)``: Windows wants four 16-bit numbers."""
    numbers = [int(n) for n in re.findall(r"\d+", version.split("+")[0])[:4]]
    if not numbers or any(n > 0xFFFF for n in numbers):
        raise ValueError(f"version {version!r} does not map to four numbers of 0..65535")
    return tuple((numbers + [0, 0, 0, 0])[:4])  # type: ignore[return-value]


def version_info_text(version: str) -> str:
    """The VSVersionInfo expression for ``version``."""
    nums = version_tuple(version)
    strings = {
        "CompanyName": "Parley",
        "FileDescription": "Parley voice assistant",
        "FileVersion": version,
        "InternalName": "Parley",
        "LegalCopyright": "Apache-2.0; Piper (GPL-3.0) and the bundled models keep their licences",
        "OriginalFilename": "Parley.exe",
        "ProductName": "Parley",
        "ProductVersion": version,
    }
    table = ",\n          ".join(f"StringStruct({k!r}, {v!r})" for k, v in strings.items())
    return f"""VSVersionInfo(
  ffi=FixedFileInfo(filevers={nums}, prodvers={nums}, mask=0x3f, flags=0x0, OS=0x40004,
                    fileType=0x1, subtype=0x0, date=(0, 0)),
  kids=[
    StringFileInfo([
      StringTable('040904B0', [
          {table}])]),
    VarFileInfo([VarStruct('Translation', [1033, 1200])])
  ]
)
"""
