"""The broker's HTTP APIs: HTTP mechanics (server), who is asking (auth), and the
event store's routes (eventstore)."""
