import csv
import subprocess
import sys
from pathlib import Path

import pytest

from kafkacompat.wire.errors import RETRIABLE, DecodeError, ErrorCode, KafkaError

ROOT = Path(__file__).resolve().parents[3]
ERRORS_TSV = ROOT.parent / "shared" / "kafka-protocol" / "errors.tsv"


def test_codes_match_kafka_table():
    if not ERRORS_TSV.exists():
        pytest.skip("Kafka's errors.tsv is not beside the project (../shared)")
    with ERRORS_TSV.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert len(rows) == len(ErrorCode)
    for row in rows:
        code = ErrorCode[row["name"]]
        assert int(code) == int(row["code"])
        assert (code in RETRIABLE) == (row["retriable"] == "yes")


def test_well_known_codes():
    assert ErrorCode.OFFSET_OUT_OF_RANGE == 1
    assert ErrorCode.UNKNOWN_TOPIC_OR_PARTITION == 3
    assert ErrorCode.UNSUPPORTED_VERSION == 35
    assert ErrorCode.UNKNOWN_SERVER_ERROR == -1


def test_kafka_error_carries_code():
    err = KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
    assert err.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert err.retriable
    assert "NOT_LEADER_OR_FOLLOWER" in str(err)
    assert not KafkaError(ErrorCode.INVALID_CONFIG).retriable


def test_decode_error_names_location():
    err = DecodeError("truncated", api_key=0, field="topic_data")
    assert "api_key=0" in str(err) and "field=topic_data" in str(err)


def test_generator_check_mode_passes_on_checked_in_file():
    if not ERRORS_TSV.exists():
        pytest.skip("Kafka's errors.tsv is not beside the project (../shared)")
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_errors.py"), "--errors", str(ERRORS_TSV), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
