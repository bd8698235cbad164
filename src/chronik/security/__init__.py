"""Security: listeners and TLS contexts, SASL mechanisms and SCRAM credentials."""
