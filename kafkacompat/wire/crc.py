"""CRC-32C (Castagnoli): the checksum of v2 record batches and of producer-state snapshots.

Theory of operation: the `crc32c` package computes it (in hardware where the CPU can). Its package
`__init__` looks its own version up through `importlib.metadata`, which imports the email, zipfile and
csv modules on the way: about 20 ms, close to a tenth of the broker's start-up to its first Metadata
answer, spent on a version string. So `crc32c` here is the package's compiled `_crc32c.crc32c`, loaded
from the package's directory without running that `__init__`. Where the package's layout differs (a
future release), the ordinary import is used instead, so only start-up time can change, never results.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from collections.abc import Callable
from typing import Any

__all__ = ["crc32c"]

_PACKAGE = "crc32c"
_EXTENSION = "_crc32c"


def _load_extension() -> Any | None:
    """The package's compiled module, loaded on its own; None if it is not where this release keeps it."""
    spec = importlib.util.find_spec(_PACKAGE)  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    for directory in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(directory, _EXTENSION + suffix)
            if not os.path.isfile(path):
                continue
            loader = importlib.machinery.ExtensionFileLoader(f"{_PACKAGE}.{_EXTENSION}", path)
            extension_spec = importlib.util.spec_from_loader(loader.name, loader, origin=path)
            if extension_spec is None:
                return None
            module = importlib.util.module_from_spec(extension_spec)
            loader.exec_module(module)
            return module
    return None


def _resolve() -> Callable[[Any], int]:
    try:
        extension = _load_extension()
    except (ImportError, OSError):
        extension = None
    function = getattr(extension, "crc32c", None)
    if callable(function):
        return function
    from crc32c import crc32c as packaged

    return packaged


# crc32c(data, value=0) -> int: CRC-32C of a bytes-like object, continuing from `value`
crc32c: Callable[..., int] = _resolve()
