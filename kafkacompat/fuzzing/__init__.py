"""A live protocol fuzzer for a broker on this machine: a development tool that serving code never imports.

Theory of operation: mutated request frames of every served API are sent to a running broker while a
well-behaved client pair measures what the broker still gives it.

- `seeds`: one meaningful request per served API at every advertised version, and the topic, group
  member and transactional producer they refer to (`prepare_target`);
- `mutations`: seeds turned into damaged frames, structure-aware and byte-level (`Mutator`);
- `run`: the run itself (`fuzz`), many connections, every answer checked (`FuzzStats`);
- `watch`: the broker process, its state and its log, watched during a run;
- `pair` and `latency`: the well-behaved producer/consumer pair and the reduction of its latency
  samples, alternating fuzzed and quiet blocks included;
- `campaign`: the pair alone, then beside the fuzzer, summed up (`run_campaign`);
- `cli`: the command line (tools/fuzz.py; `python -m kafkacompat.fuzzing good-pair` for the pair).

docs/RELIABILITY.md ("Live fuzzing") has the figures. The tests are kafkacompat/_tests/test_fuzzer.py
and the live run compat_tests/test_fuzz.py.
"""
