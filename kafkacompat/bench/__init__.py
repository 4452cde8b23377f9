"""The benchmark suite: kafkacompat side by side with peer brokers, driven by real clients.

Theory of operation: `cli` parses options into `runner.Settings` and broker specs; `runner` starts
the brokers (`brokers`), alternates the workloads between them, each client in a process of its own
(`workers`), and measures memory and CPU from /proc (`procinfo`); `stats` turns runs into medians and
percentiles; `report` renders the table, checks the goals and draws the charts; `peers` downloads the
peer brokers. Entry points: `kafkacompat bench ...` and `tools/bench.py ...` (the same parser).
"""
