"""Cluster metadata and replication (single node: `metadata.LocalMetadata`)."""
