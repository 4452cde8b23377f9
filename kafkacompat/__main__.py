from kafkacompat.cli import main

raise SystemExit(main())
