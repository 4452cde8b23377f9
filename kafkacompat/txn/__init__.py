"""The transaction coordinator (sans-io core, records of `__transaction_state`); the trio edge is
kafkacompat/broker/txn_runtime.py."""
