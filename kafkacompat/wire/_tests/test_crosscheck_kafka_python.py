"""Cross-check the generated codecs against an independent implementation: kafka-python 3.x.

kafka-python 3.x ships its own protocol classes (`kafka.protocol.*`) with their own encoder and
decoder. For every API and version both sides know, hypothesis draws a message from Kafka's specs
(see test_messages.py), and:

* kafka-python builds the same message from our values and encodes it: the bytes must equal ours;
* kafka-python decodes our bytes: every field it knows must hold our value.

Where kafka-python's bundled spec differs from ours for a version, the pair is listed in
`KNOWN_DIFFERENCES` with the reason, and skipped.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkacompat.wire import messages
from kafkacompat.wire._tests.test_messages import HAVE_SPECS, encode, message_strategy

kafka_protocol = pytest.importorskip("kafka.protocol.api_message", reason="kafka-python 3.x not installed")


def _kp_classes() -> dict[tuple[int, str], type]:
    out: dict[tuple[int, str], type] = {}
    base = kafka_protocol.ApiMessage
    for pkg_name in ("metadata", "producer", "consumer", "admin"):
        pkg = importlib.import_module(f"kafka.protocol.{pkg_name}")
        for info in pkgutil.iter_modules(pkg.__path__):
            mod = importlib.import_module(f"kafka.protocol.{pkg_name}.{info.name}")
            for name in dir(mod):
                cls = getattr(mod, name)
                is_message = isinstance(cls, type) and issubclass(cls, base) and cls is not base
                if is_message and cls._json is not None:
                    out[(cls.API_KEY, cls.type)] = cls
    return out


KP = _kp_classes()


def _norm(name: str) -> str:
    return name.replace("_", "").lower()


def _kp_max(cls: type) -> int:
    return cls._valid_versions[1]


def cases() -> list[tuple[int, str, int]]:
    out = []
    for (key, kind), cls in sorted(KP.items()):
        spec = messages.API_SPECS.get(key)
        if spec is None:
            continue
        lo = max(spec.min_version, cls._valid_versions[0])
        hi = min(spec.max_version, _kp_max(cls))
        for v in range(lo, hi + 1):
            out.append((key, kind, v))
    return out


def _module_name(key: int, kind: str) -> str:
    spec = messages.API_SPECS[key]
    return spec.request_module if kind == "request" else spec.response_module


def _strip_unknown(obj: Any) -> Any:
    """kafka-python keeps unknown tags differently; the cross-check covers known fields only."""
    if hasattr(obj, "__slots__") and hasattr(obj, "unknown_tags"):
        obj.unknown_tags = None
        for name in obj.__slots__:
            value = getattr(obj, name)
            if isinstance(value, list):
                for v in value:
                    _strip_unknown(v)
            else:
                _strip_unknown(value)
    return obj


def _our_attr(obj: Any, kp_name: str) -> str:
    target = _norm(kp_name)
    for name in obj.__slots__:
        if _norm(name) == target:
            return name
    if target == "authorizedoperations":  # kafka-python renames Topic/ClusterAuthorizedOperations
        for name in obj.__slots__:
            if name.endswith("authorized_operations"):
                return name
    raise KeyError(f"{type(obj).__name__} has no field matching kafka-python's {kp_name}")


def _is_bitfield(field: Any) -> bool:
    return field.type_str == "bitfield"


def _bits(value: int) -> set[int]:
    return {b for b in range(32) if (value & 0xFFFFFFFF) >> b & 1}


def _to_kp_value(field: Any, value: Any, v: int) -> Any:
    if value is None:
        return None
    if _is_bitfield(field):
        return _bits(value)
    if field.is_struct():
        return _to_kp_struct(field.data_class, field, value, v)
    if field.is_struct_array():
        return [_to_kp_struct(field.data_class, field, e, v) for e in value]
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def _to_kp_struct(data_class: type, struct_field: Any, obj: Any, v: int, top: bool = False) -> Any:
    defaults = type(obj)()
    kwargs: dict[str, Any] = {}
    for field in struct_field.fields.values():
        if not field.for_version_q(v):
            continue
        attr = _our_attr(obj, field._name)
        value = getattr(obj, attr)
        if field.tagged_field_q(v) and value == getattr(defaults, attr):
            continue  # we write tagged fields only when they differ from the default
        kwargs[field.name] = _to_kp_value(field, value, v)
    if top:
        return data_class(version=v, **kwargs)
    return data_class(**kwargs)


def _compare(kp_obj: Any, ours: Any, struct_field: Any, v: int, path: str) -> None:
    for field in struct_field.fields.values():
        if not field.for_version_q(v):
            continue
        attr = _our_attr(ours, field._name)
        mine = getattr(ours, attr)
        theirs = getattr(kp_obj, field.name)
        where = f"{path}.{attr}"
        if field.is_struct():
            if mine is None or theirs is None:
                assert mine is None and theirs is None, where
            else:
                _compare(theirs, mine, field, v, where)
        elif field.is_struct_array():
            if mine is None or theirs is None:
                assert mine is None and theirs is None, where
            else:
                assert len(mine) == len(theirs), where
                for i, (a, b) in enumerate(zip(theirs, mine, strict=True)):
                    _compare(a, b, field, v, f"{where}[{i}]")
        else:
            if isinstance(mine, memoryview):
                mine = bytes(mine)
            if isinstance(theirs, memoryview):
                theirs = bytes(theirs)
            if _is_bitfield(field):  # kafka-python turns authorized-operations bitfields into sets
                mine = _bits(mine)
                theirs = {31} if theirs is None else theirs
            assert theirs == mine, f"{where}: kafka-python {theirs!r} != ours {mine!r}"


# kafka-python 3.0.x differs from the Kafka specs we generate from on these (api key, kind, version)s.
KNOWN_DIFFERENCES: dict[tuple[int, str, int], str] = {
    (74, "response", 0): "kafka-python bundles an older ListClientMetricsResources spec (field names differ)",
}


@pytest.mark.skipif(not HAVE_SPECS, reason="Kafka specs (../shared/kafka-protocol) not present")
@pytest.mark.parametrize(
    ("api_key", "kind", "version"), [case for case in cases() if case not in KNOWN_DIFFERENCES]
)
@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(data=st.data())
def test_same_bytes_as_kafka_python(api_key: int, kind: str, version: int, data: st.DataObject) -> None:
    module_name = _module_name(api_key, kind)
    ours = _strip_unknown(data.draw(message_strategy(module_name, version)))
    if api_key == 18 and kind == "response":
        # kafka-python reads an ApiVersions response with an error as v0 (as the Java client does).
        ours.error_code = 0
    wire = encode(module_name, version, ours)
    kp_cls = KP[(api_key, kind)]
    # kafka-python decodes our bytes to the same values ...
    decoded = kp_cls.decode(memoryview(wire), version=version)
    _compare(decoded, ours, kp_cls._struct, version, kp_cls.__name__)
    # ... and encodes the same message, built from our values, to the same bytes.
    kp_obj = _to_kp_struct(kp_cls, kp_cls._struct, ours, version, top=True)
    assert bytes(kp_obj.encode(version=version)) == wire


def test_known_differences_are_still_different() -> None:
    """An excluded case stays excluded only while kafka-python's bundled spec really differs from ours."""
    from kafkacompat.wire.messages import request_class, response_class

    for api_key, kind, _version in KNOWN_DIFFERENCES:
        ours_cls = response_class(api_key) if kind == "response" else request_class(api_key)
        ours = {name for name in ours_cls.__slots__ if name != "unknown_tags"}
        theirs = {field.name for field in KP[(api_key, kind)]._struct.fields.values()}
        assert ours != theirs, f"kafka-python now agrees on {(api_key, kind)}: drop it from KNOWN_DIFFERENCES"
