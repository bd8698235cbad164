"""The schema registry's state and its log: Confluent Schema Registry's data model
(subjects, versions, global schema ids, compatibility configs, modes) kept in the
compacted ``_schemas`` topic in Confluent's own record format, rebuilt by reading it."""
