"""`python -m kafkacompat.fuzzing`: the fuzzer's command line (kafkacompat.fuzzing.cli)."""

from kafkacompat.fuzzing.cli import main

raise SystemExit(main())
