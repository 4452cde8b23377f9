from __future__ import annotations

import subprocess
import sys

import crc32c as crc32c_package
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkacompat.wire import crc


def test_known_vectors() -> None:
    # RFC 3720 (iSCSI) appendix B.4 and the common "123456789" check value
    assert crc.crc32c(bytes(32)) == 0x8A9136AA
    assert crc.crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc.crc32c(b"123456789") == 0xE3069283


@given(st.binary(max_size=4096), st.binary(max_size=512))
def test_matches_the_package_and_continues_from_a_value(data: bytes, more: bytes) -> None:
    assert crc.crc32c(data) == crc32c_package.crc32c(data)
    assert crc.crc32c(more, crc.crc32c(data)) == crc32c_package.crc32c(data + more)
    assert crc.crc32c(memoryview(bytearray(data))) == crc32c_package.crc32c(data)


def test_loading_it_skips_the_packages_version_lookup() -> None:
    code = (
        "import sys, kafkacompat.wire.crc;"
        " print('importlib.metadata' in sys.modules, 'crc32c' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_falls_back_to_the_package_when_the_extension_is_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crc, "_EXTENSION", "_no_such_module")
    assert crc._load_extension() is None
    assert crc._resolve() is crc32c_package.crc32c
