"""`kafkacompat serve`: run a broker in the foreground.

Theory of operation: load the config (Java-properties file plus `--override key=value`), set up
logging, and run `Broker.run()` under trio next to a signal watcher. The first SIGTERM/SIGINT starts an
orderly shutdown (stop accepting, finish in-flight requests, checkpoints and the clean-shutdown
marker); a second one exits at once. Imports of the broker are deferred until after argument parsing
so that `--help` and config errors answer immediately.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import time
from typing import Any

HELP = "run a Kafka-compatible broker (reads Kafka's server.properties names)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="a server.properties file")
    parser.add_argument(
        "--override",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="set one config value (repeatable; wins over the file)",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("KAFKACOMPAT_LOG_LEVEL", "INFO"),
        type=_log_level,
        metavar="LEVEL",
        help=f"logging level: {', '.join(LOG_LEVELS)} (default INFO)",
    )


#: the levels `--log-level` takes: log4j's names, as Kafka's broker-loggers use them (TRACE is below
#: DEBUG, OFF silences), and Python's WARNING and CRITICAL; case does not matter
LOG_LEVELS: dict[str, int] = {
    "TRACE": 5,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "CRITICAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}


def _log_level(text: str) -> int:
    level = LOG_LEVELS.get(text.strip().upper())
    if level is None:
        raise argparse.ArgumentTypeError(f"invalid level {text!r} (choose from {', '.join(LOG_LEVELS)})")
    return level


#: how long a Python thread may hold the GIL while another waits for it (CPython's default: 5 ms). The
#: event loop shares the GIL with worker threads (log creation, large decodes and encodes, fsyncs) and the
#: acceptor threads; every time it waits for the GIL it waits up to this long, so the default made any
#: thread's Python work a 5 ms stall of every client (beside the fuzzer, with 2 ms turns, the pair's p99
#: was 10.6 ms at 5 ms and 8.3 ms at 1 ms; see broker/fairness.py)
SWITCH_INTERVAL_SECONDS = 0.001

#: allocations (net, of container objects) between two young collections; CPython's default is 700
YOUNG_COLLECTION_ALLOCATIONS = 10_000


def settle_garbage_collector() -> None:
    """Once start-up is done: freeze what it loaded, and collect the young generation less often.

    What start-up loaded (modules, codecs, recovered logs and metadata) lives as long as the process:
    `gc.freeze()` moves it out of the collector's generations, so the collections that request traffic
    triggers do not walk it again and again. A full collection pauses the event loop for every tracked
    object not frozen (about 50 ns each here: 10-55 ms seen beside a fuzzer), and in CPython 3.11 one is
    due every 10 middle-generation collections, themselves every 10 young ones: at the default young
    threshold of 700 allocations, objects that live only as long as a request (a parked fetch, a
    response being written) survived two young collections and were promoted, and a paced fuzz run
    (tools/fuzz.py, 300 frames/s, ~100 s of broker life) saw 149 middle and 14 full collections, 132 ms
    of collection pauses over 5 ms. At YOUNG_COLLECTION_ALLOCATIONS: 9 middle and 1 full, 34 ms (and at
    full fuzzing speed 82 full collections, 4.7 s of pauses, became 6 and 1.1 s); a young collection of
    10,000 objects that all survive takes ~0.1 ms. From then on every full collection's survivors are
    frozen too, with a periodic thaw (FreezeSurvivors).
    """
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, middle, old)
    gc.callbacks.append(FreezeSurvivors().on_gc)


#: a thaw comes once this many objects were frozen since the last one, at the least (see FreezeSurvivors)
THAW_MIN_OBJECTS = 100_000
#: and at the latest this long after the last one
THAW_SECONDS = 600.0


class FreezeSurvivors:
    """After each full collection, freeze its survivors; every so often, thaw them for one full walk.

    A full collection walks every tracked object that is not frozen, and objects that live as long as
    the broker (a partition log is ~27 of them: segments, indexes, producer state, locks, closures)
    are walked every time: 3,763 partition logs made each full collection of a long fuzz run 50-190 ms
    of CPU (about 0.5-1 µs per object in a heap that traffic has fragmented), 104 of them in 55 minutes,
    each a pause of every client. Right after a full collection every tracked object is a survivor (the
    younger generations were merged into it), so `gc.freeze()` in the collection's "stop" callback moves
    exactly the survivors to the permanent generation, and the next full collection walks only what
    survived since: a few milliseconds.

    The price: a cycle among frozen objects that later becomes garbage (a deleted partition log, a
    connection that was open at the freeze) is not collected while frozen. So once as many objects
    were frozen since the last thaw as there were after it (at least THAW_MIN_OBJECTS), or THAW_SECONDS
    after it, the collection's callback unfreezes everything instead, and the next full collection walks
    and collects it all, as every full collection did before; its survivors are the new baseline.
    Frozen garbage is so bounded by the live heap after the last thaw and by ten minutes of traffic.

    Runs inside gc callbacks, on whichever thread allocated; owns only its own counters.
    """

    def __init__(self) -> None:
        self.baseline = gc.get_freeze_count()
        self.thawed_at = time.monotonic()
        self.thawing = False

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase != "stop" or info["generation"] != 2:
            return
        gc.freeze()
        frozen = gc.get_freeze_count()
        if self.thawing:  # this collection walked everything: its survivors are the baseline
            self.thawing = False
            self.baseline = frozen
            self.thawed_at = time.monotonic()
        elif frozen - self.baseline >= max(self.baseline, THAW_MIN_OBJECTS) or (
            time.monotonic() - self.thawed_at >= THAW_SECONDS
        ):
            gc.unfreeze()
            self.thawing = True


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level,
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from kafkacompat.config import BrokerConfig, ConfigError

    try:
        config = BrokerConfig.load(args.config, args.override)
    except ConfigError as exc:
        print(f"kafkacompat serve: {exc}", file=sys.stderr)
        return 2
    import trio

    # The request path (connection, dispatch, every handler and the codecs they import) is imported
    # by the server on its first connection; that import held the event loop ~0.2-0.3 s of CPU, every
    # client waiting, and its objects stayed outside the freeze below. Importing it before the loop runs
    # moves that to start-up.
    import kafkacompat.broker.connection  # noqa: F401
    from kafkacompat.broker.server import Broker

    broker = Broker(config)

    async def main() -> None:
        import signal

        async with trio.open_nursery() as nursery:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:

                async def watch_signals() -> None:
                    count = 0
                    async for signum in signals:
                        count += 1
                        if count == 1:
                            logging.getLogger("kafkacompat").info(
                                "received %s, shutting down (send again to exit at once)",
                                signal.Signals(signum).name,
                            )
                            broker.request_shutdown()
                        else:
                            os._exit(128 + signum)

                nursery.start_soon(watch_signals)

                async def run_broker(task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
                    await broker.run(task_status=task_status)
                    nursery.cancel_scope.cancel()

                await nursery.start(run_broker)
                settle_garbage_collector()
                sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
                await trio.sleep_forever()  # signals stay ours until run_broker cancels the nursery

    status = 0
    try:
        trio.run(main)
    except* ConfigError as group:
        for exc in _leaves(group):
            print(f"kafkacompat serve: {exc}", file=sys.stderr)
        status = 2
    except* (OSError, RuntimeError) as group:
        # cannot bind, log dir of another cluster or node, unreadable files
        for exc in _leaves(group):
            print(f"kafkacompat serve: {exc}", file=sys.stderr)
        status = 1
    return status


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    """The exceptions inside a (nested) exception group."""
    leaves: list[BaseException] = []
    for exc in group.exceptions:
        leaves.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return leaves
