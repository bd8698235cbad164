"""Schemas for events: parsing, normal forms, compatibility and value checks for the three
formats Confluent Schema Registry knows (AVRO, JSON, PROTOBUF), and the Confluent wire
format of a framed value. No I/O and nothing of the broker: the registry, the produce
check, the event store and the Spark source all stand on this layer."""
