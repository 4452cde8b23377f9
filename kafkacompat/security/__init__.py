"""Security: TLS contexts and principals, SASL mechanisms and sessions, SCRAM credentials (sans-io)."""
