"""Turning a results dict (from `runner.run_benchmark`, or a saved JSON file) into a table, goals, charts.

Theory of operation: every function here reads the JSON-ready dict only, so a report can be rebuilt
from a saved `--json` file (`tools/bench.py report --json FILE [--plot DIR]`) on another machine or
with another Python that has matplotlib. `table_rows()` produces (metric, cell per broker, ratio per
peer) rows; `render_table()` aligns them as plain text; `evaluate_goals()` checks the figures the
performance issue asks kafkacompat to reach, returning "met", "not met" or "not measured" with the
figure that decided it. Ratios are always kafkacompat ÷ peer: above 1 is better for throughput, below
1 is better for latency, time and memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kafkacompat.bench.stats import ratio

__all__ = ["GOALS", "evaluate_goals", "failures", "plot", "render_goals", "render_table", "table_rows"]

OURS = "kafkacompat"


def _digits(value: float, digits: int) -> int:
    """Decimals to show: none from 100 up (a throughput of 1,234 MB/s needs no tenths)."""
    return 0 if abs(value) >= 100 else digits


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{_digits(value, digits)}f}"


def _spread(summary: dict[str, Any] | None, scale: float = 1.0, digits: int = 1) -> str:
    """ "median [min-max]" of a RunSummary dict, all three with the median's precision."""
    if not summary:
        return "-"
    med, low, high = (summary[k] * scale for k in ("median", "min", "max"))
    places = _digits(med, digits)
    if len(summary.get("runs", ())) <= 1:
        return f"{med:,.{places}f}"
    return f"{med:,.{places}f} [{low:,.{places}f}-{high:,.{places}f}]"


def _median(summary: dict[str, Any] | None, scale: float = 1.0) -> float | None:
    return summary["median"] * scale if summary else None


def _count_spread(summary: dict[str, Any] | None) -> str:
    """ "median [min-max]" of a RunSummary dict of counts ("-" when absent): 2, 1.5, 2 [1-3]."""
    if not summary:
        return "-"
    med, low, high = (summary[k] for k in ("median", "min", "max"))
    return f"{med:g}" if low == high else f"{med:g} [{low:g}-{high:g}]"


Row = tuple[str, list[str], list[float | None]]


def _row(
    label: str,
    names: Sequence[str],
    cell: Any,
    value: Any,
) -> Row:
    """One table row: text per broker and the kafkacompat ÷ peer ratio per peer (first name is ours)."""
    cells = [cell(name) for name in names]
    ours = value(names[0]) if names else None
    ratios = [ratio(ours, value(name)) for name in names[1:]]
    return label, cells, ratios


def table_rows(results: dict[str, Any]) -> tuple[list[str], list[Row]]:
    """(broker names, rows) for the side-by-side table; kafkacompat first when present."""
    names = list(results.get("brokers", {}))
    if OURS in names:
        names.remove(OURS)
        names.insert(0, OURS)
    brokers = results.get("brokers", {})
    rows: list[Row] = []

    def broker_field(key: str, scale: float = 1.0, digits: int = 1) -> tuple[Any, Any]:
        def cell(name: str) -> str:
            value = brokers.get(name, {}).get(key)
            if isinstance(value, dict):
                return _spread(value, scale, digits)
            return _fmt(value * scale if value is not None else None, digits)

        def value(name: str) -> float | None:
            v = brokers.get(name, {}).get(key)
            if isinstance(v, dict):
                return _median(v, scale)
            return v * scale if v is not None else None

        return cell, value

    rows.append(_row("start-up to first Metadata (ms)", names, *broker_field("startup_s", 1000, 0)))
    rows.append(_row("idle RSS (MiB)", names, *broker_field("idle_rss_mib")))
    rows.append(_row("peak RSS under produce load (MiB)", names, *broker_field("peak_rss_mib")))

    for entry in results.get("throughput", {}).values():
        per = entry.get("per_broker", {})

        def metric(key: str, per: dict[str, Any] = per) -> tuple[Any, Any]:
            def cell(name: str) -> str:
                record = per.get(name) or {}
                if not record.get(key):
                    failures = record.get("failures") or []
                    return "failed" if failures else "-"
                return _spread(record[key], digits=1 if key in ("mb_s", "msgs_s") else 2)

            def value(name: str) -> float | None:
                return _median((per.get(name) or {}).get(key))

            return cell, value

        rows.append(_row(f"{entry['label']} (MB/s)", names, *metric("mb_s")))
        rows.append(_row("    records/s", names, *metric("msgs_s")))
        rows.append(_row("    broker CPU (cores)", names, *metric("broker_cpu_cores")))
        rows.append(_row("    broker CPU-seconds per GB", names, *metric("broker_cpu_s_per_gb")))
        rows.append(_row("    client CPU (cores)", names, *metric("client_cpu_cores")))

    latency = results.get("latency", {})
    if latency:
        rate = results.get("meta", {}).get("settings", {}).get("e2e_rate", "?")
        for key in ("p50", "p99", "p99.9", "max"):

            def lat_cell(name: str, key: str = key) -> str:
                record = latency.get(name) or {}
                if key not in record:
                    return "failed" if record.get("error") else "-"
                return _spread(record[key], digits=2)

            def lat_value(name: str, key: str = key) -> float | None:
                return _median((latency.get(name) or {}).get(key))

            rows.append(_row(f"e2e latency {key} at {rate} msg/s (ms)", names, lat_cell, lat_value))

    for members, per in results.get("groups", {}).items():

        def join_cell(name: str, per: dict[str, Any] = per) -> str:
            record = per.get(name) or {}
            if record.get("na"):
                return record["na"]
            if not record.get("seconds"):
                return "failed" if record.get("failures") else "-"
            return _spread(record["seconds"], 1000, 0)

        def join_value(name: str, per: dict[str, Any] = per) -> float | None:
            return _median((per.get(name) or {}).get("seconds"), 1000)

        rows.append(_row(f"group join, {members} consumer(s) (ms)", names, join_cell, join_value))

    big = results.get("big", {})
    if big:
        mib = next(iter(big.values())).get("mib")

        def big_metric(key: str, error_key: str) -> tuple[Any, Any]:
            # results files from before the second read lack its keys: their cells show "-"
            def cell(name: str) -> str:
                record = big.get(name) or {}
                if not record.get(key):
                    return "failed" if record.get(error_key) else "-"
                return _spread(record[key])

            def value(name: str) -> float | None:
                return _median((big.get(name) or {}).get(key))

            return cell, value

        def pauses_cell(name: str) -> str:
            return _count_spread((big.get(name) or {}).get("pauses"))

        label = f"read {mib} MiB partition from 0"
        rows.append(_row(f"{label}, default consumer (MB/s)", names, *big_metric("consume_mb_s", "error")))
        rows.append(_row("    client back-off pauses per read", names, pauses_cell, lambda name: None))
        rows.append(
            _row(
                f"{label}, default fetch settings, fetch.queue.backoff.ms=1 (MB/s)",
                names,
                *big_metric("backoff1_mb_s", "backoff1_error"),
            )
        )
    return names, rows


def render_table(results: dict[str, Any], markdown: bool = False) -> str:
    names, rows = table_rows(results)
    header = ["metric", *names, *(f"{OURS} ÷ {peer}" for peer in names[1:])]
    body = [
        [label, *cells, *(f"{r:.2f}x" if r is not None else "-" for r in ratios)]
        for label, cells, ratios in rows
    ]
    if markdown:
        lines = [
            "| " + " | ".join(header) + " |",
            "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
        ]
        # Markdown collapses leading blanks: mark the sub-rows (records/s, CPU) with a middle dot instead
        lines += [
            "| " + " | ".join(("· " + cell.strip() if cell.startswith(" ") else cell) for cell in row) + " |"
            for row in body
        ]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    out = []
    for n, row in enumerate([header, *body]):
        out.append(
            "  ".join(
                cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)
            )
        )
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def failures(results: dict[str, Any]) -> list[str]:
    """One line per workload and broker that failed at least once: the first error, shortened."""
    lines = []

    def add(broker: str, label: str, errors: list[str], of: int | None = None, skipped: int = 0) -> None:
        if errors:
            count = f" ({len(errors)} of {of} runs)" if of else ""
            if skipped:
                count = f"{count[:-1]}; {skipped} more skipped)"
            first = " ".join(str(errors[0]).split())
            lines.append(f"{broker}: {label}{count}: {first[:300]}")

    for entry in results.get("throughput", {}).values():
        for broker, record in entry.get("per_broker", {}).items():
            errors = record.get("failures") or []
            ran = len(errors) + len(record.get("runs") or [])
            add(broker, entry["label"], errors, ran, record.get("skipped_runs", 0))
    for broker, record in results.get("latency", {}).items():
        add(broker, "e2e latency", [record["error"]] if record.get("error") else [])
    for members, per in results.get("groups", {}).items():
        for broker, record in per.items():
            errors = record.get("failures") or []
            add(broker, f"group join ({members})", errors, len(errors) + len(record.get("runs") or []))
    for broker, record in results.get("big", {}).items():
        add(broker, "large partition", [record["error"]] if record.get("error") else [])
        errors = [record["backoff1_error"]] if record.get("backoff1_error") else []
        add(broker, "large partition, fetch.queue.backoff.ms=1", errors)
    for broker, record in results.get("brokers", {}).items():
        add(broker, "broker", record.get("errors") or [])
    return lines


# --- goals ---------------------------------------------------------------------------------------

GOALS: list[tuple[str, str]] = [
    ("produce-1k-acks-all", "Produce 1 KiB acks=all ≥ 1.0x tansu (goal 1.5x)"),
    ("consume-1k", "Consume 1 KiB ≥ 1.5x tansu"),
    ("e2e-p50", "End-to-end p50 ≤ 2 ms at 2,000 msg/s"),
    ("e2e-p99", "End-to-end p99 ≤ 5 ms at 2,000 msg/s"),
    ("join-1", "Group join ≤ 0.3 s for one consumer (initial rebalance delay 0)"),
    ("join-3", "Group join ≤ 0.5 s for three consumers (initial rebalance delay 0)"),
    ("startup", "Start-up to first Metadata ≤ 300 ms"),
    ("idle-rss", "Idle RSS ≤ 40 MiB"),
    ("load-rss", "RSS during produce ≤ 150 MiB"),
    ("big", "A large partition served from offset 0 to a default-configured consumer at full speed"),
]


def _throughput_median(results: dict[str, Any], wid: str, broker: str) -> float | None:
    record = results.get("throughput", {}).get(wid, {}).get("per_broker", {}).get(broker) or {}
    return _median(record.get("mb_s"))


def evaluate_goals(results: dict[str, Any], peer: str = "tansu") -> list[tuple[str, str, str]]:
    """[(goal, "met" | "not met" | "not measured", evidence)] for kafkacompat's figures."""
    out: list[tuple[str, str, str]] = []

    def verdict(ok: bool) -> str:
        return "met" if ok else "not met"

    for key, text in GOALS:
        status, evidence = "not measured", ""
        if key in ("produce-1k-acks-all", "consume-1k"):
            wid = "produce-1024-acksall" if key == "produce-1k-acks-all" else "consume-1024"
            ours, theirs = _throughput_median(results, wid, OURS), _throughput_median(results, wid, peer)
            r = ratio(ours, theirs)
            if r is None:
                evidence = f"needs both kafkacompat and {peer} figures"
            else:
                need = 1.0 if key == "produce-1k-acks-all" else 1.5
                status = verdict(r >= need)
                evidence = f"{ours:.1f} vs {theirs:.1f} MB/s = {r:.2f}x"
                if key == "produce-1k-acks-all":
                    evidence += " (stretch goal 1.5x: " + ("met" if r >= 1.5 else "not met") + ")"
        elif key in ("e2e-p50", "e2e-p99"):
            record = results.get("latency", {}).get(OURS) or {}
            pkey, limit = ("p50", 2.0) if key == "e2e-p50" else ("p99", 5.0)
            if pkey in record:
                value = record[pkey]["median"]
                status = verdict(value <= limit)
                evidence = f"{pkey} = {value:.2f} ms (median of {len(record[pkey]['runs'])} runs)"
        elif key in ("join-1", "join-3"):
            members, limit = ("1", 0.3) if key == "join-1" else ("3", 0.5)
            record = results.get("groups", {}).get(members, {}).get(OURS) or {}
            if record.get("na"):
                evidence = record["na"]
            elif record.get("seconds"):
                med = record["seconds"]["median"]
                runs = record["seconds"].get("runs") or []
                within = sum(1 for r in runs if r <= limit)
                # met only when every run is within the limit: one slow join is what a user meets
                status = verdict(med <= limit and within == len(runs))
                evidence = f"median {med * 1000:.0f} ms; {within} of {len(runs)} runs within the limit"
            elif record.get("failures"):
                status, evidence = "not met", f"failed: {record['failures'][0]}"
        elif key == "startup":
            startup = (results.get("brokers", {}).get(OURS) or {}).get("startup_s")
            if startup:
                status = verdict(startup["median"] <= 0.3)
                evidence = f"median {startup['median'] * 1000:.0f} ms"
        elif key in ("idle-rss", "load-rss"):
            field, limit = ("idle_rss_mib", 40.0) if key == "idle-rss" else ("peak_rss_mib", 150.0)
            value = (results.get("brokers", {}).get(OURS) or {}).get(field)
            if value is not None:
                status = verdict(value <= limit)
                evidence = f"{value:.1f} MiB"
        elif key == "big":
            status, evidence = _big_goal(results)
        out.append((text, status, evidence))
    return out


def _big_goal(results: dict[str, Any]) -> tuple[str, str]:
    """The "full speed" goal: the read with default fetch settings (only the client's 1 s fetch back-off taken
    out) reaches at least 80 % of the small-topic consume figure of the same run. The fully default
    read's rate is the client's (see runner.BIG_READS), so it is shown, not judged."""
    record = results.get("big", {}).get(OURS) or {}
    base = _throughput_median(results, "consume-1024", OURS)
    fast, default = _median(record.get("backoff1_mb_s")), _median(record.get("consume_mb_s"))
    if default is not None:
        pauses = record.get("pauses")
        count = _count_spread(pauses)
        noun = "pause" if count == "1" else "pauses"
        paused = f", {count} client back-off {noun} per read" if pauses else ""
        default_text = f"fully default consumer: {default:.0f} MB/s{paused}"
    else:
        failed = f"failed: {record['error']}" if record.get("error") else "-"
        default_text = f"fully default consumer: {failed}"
    if fast is not None and base:
        share = fast / base
        return (
            "met" if share >= 0.8 else "not met",
            f"default fetch settings: {fast:.0f} MB/s = {share:.0%} of the small-topic rate; {default_text}",
        )
    if record.get("backoff1_error"):
        return "not met", f"default fetch settings: failed: {record['backoff1_error']}; {default_text}"
    if record.get("error") and default is None:
        return "not met", f"failed: {record['error']}"
    if default is not None and base:
        return "not measured", f"no fetch.queue.backoff.ms=1 read in these results; {default_text}"
    return "not measured", ""


def render_goals(results: dict[str, Any], peer: str = "tansu", markdown: bool = False) -> str:
    goals = evaluate_goals(results, peer)
    if markdown:
        lines = ["| goal | status | figure |", "|---|---|---|"]
        lines += [f"| {g} | {s} | {e} |" for g, s, e in goals]
        return "\n".join(lines)
    width = max(len(g) for g, _, _ in goals)
    return "\n".join(f"{g.ljust(width)}  {s:<12}  {e}" for g, s, e in goals)


# --- charts --------------------------------------------------------------------------------------


def plot(results: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Throughput bars and a latency CDF as PNGs; raises ImportError if matplotlib is missing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    names, _ = table_rows(results)
    entries = list(results.get("throughput", {}).values())
    if entries:
        fig, ax = plt.subplots(figsize=(9, 4.5), dpi=80)
        width = 0.8 / max(len(names), 1)
        for i, name in enumerate(names):
            medians, errs_low, errs_high = [], [], []
            for entry in entries:
                summary = (entry["per_broker"].get(name) or {}).get("mb_s")
                med = summary["median"] if summary else 0.0
                medians.append(med)
                errs_low.append(med - summary["min"] if summary else 0.0)
                errs_high.append(summary["max"] - med if summary else 0.0)
            xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(entries))]
            ax.bar(xs, medians, width, yerr=[errs_low, errs_high], capsize=3, label=name)
        ax.set_xticks(range(len(entries)), [e["label"] for e in entries], rotation=20, ha="right", fontsize=8)
        ax.set_ylabel("MB/s (median, min-max)")
        ax.set_title("Throughput")
        ax.legend()
        fig.tight_layout()
        path = out / "bench-throughput.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    latency = {n: r for n, r in results.get("latency", {}).items() if r.get("cdf")}
    if latency:
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=80)
        for name in names:
            if name in latency:
                xs, ys = zip(*latency[name]["cdf"], strict=True)
                ax.step(xs, ys, where="post", label=name)
        ax.set_xscale("log")
        ax.set_xlabel("end-to-end latency (ms, log scale)")
        ax.set_ylabel("fraction of messages")
        rate = results.get("meta", {}).get("settings", {}).get("e2e_rate", "?")
        ax.set_title(f"End-to-end latency CDF at {rate} msg/s")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out / "bench-latency-cdf.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written
