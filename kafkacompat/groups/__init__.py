"""Classic consumer group coordinator: a synchronous, sans-io, event-sourced core (no trio here).

Modules
-------
* ``manager.GroupCoordinatorCore`` — every operation: ``join_group``, ``sync_group``, ``heartbeat``,
  ``leave_group``, ``offset_commit``, ``offset_fetch``, ``offset_delete``, ``describe_groups``,
  ``list_groups``, ``delete_groups``; time: ``tick(now_ms)``, ``next_deadline()``; state:
  ``begin_loading(p)``, ``replay(key, value)``, ``finish_loading(p, now_ms)``,
  ``unload_partition(p, now_ms)``, ``load_empty_partitions(ps, now_ms)``; ``partition_for(group_id)``.
  ``GroupConfig`` (``config.py``; ``GroupConfig.from_properties`` takes Kafka's config names). The class
  is built from layers, one module each: ``base`` (state, outcome plumbing), ``membership`` (join, sync,
  heartbeat, leave, rebalance), ``loading`` (replay and unloading), ``offset_ops`` (offset commit,
  transactional offsets, fetch, delete, expiry), ``admin`` (describe, list, delete groups).
* ``api`` — the request/response dataclasses and ``Outcome`` / ``Parked`` / ``Completion`` /
  ``CoordinatorRecord`` (what a handler converts wire objects to and from).
* ``records`` — __consumer_offsets key/value codecs in Kafka's binary formats, ``partition_for``.
* ``group``, ``state``, ``offsets``, ``timers`` — the bookkeeping the core owns.

A broker handler converts the decoded request into the ``api`` dataclass, calls the core through the
runtime (which serializes calls and owns the clock), appends ``outcome.records`` to __consumer_offsets,
then answers; see the docstrings of ``manager`` and ``api`` for the exact contract.
"""
