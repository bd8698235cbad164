"""Confluent Schema Registry's errors: an HTTP status and an error code of its own, with
its messages, so clients that match on either behave as against Confluent's."""

from __future__ import annotations


class RegistryError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: object) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(what: str = "Schema not found") -> RegistryError:
    return RegistryError(404, 40403, what)


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(
        404,
        40404,
        f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently",
    )


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(
        404,
        40405,
        f"Subject '{subject}' was not deleted first before being permanently deleted",
    )


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404,
        40406,
        f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true to "
        "delete permanently",
    )


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404,
        40407,
        f"Subject '{subject}' Version {version} was not deleted first before being "
        "permanently deleted",
    )


def subject_config_not_found(subject: str) -> RegistryError:
    return RegistryError(
        404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured"
    )


def subject_mode_not_found(subject: str) -> RegistryError:
    return RegistryError(
        404, 40409, f"Subject '{subject}' does not have subject-level mode configured"
    )


def invalid_schema(detail: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema {detail}")


def invalid_version(text: object) -> RegistryError:
    return RegistryError(
        422,
        42202,
        f"The specified version '{text}' is not a valid version id. Allowed values are "
        'between [1, 2^31-1] and the string "latest"',
    )


def invalid_compatibility(level: object) -> RegistryError:
    return RegistryError(
        422,
        42203,
        f"Invalid compatibility level {level!r}. Valid values are none, backward, forward, "
        "full, backward_transitive, forward_transitive, and full_transitive",
    )


def invalid_mode(mode: object) -> RegistryError:
    return RegistryError(
        422, 42204, f"Invalid mode {mode!r}. Valid values are READWRITE, READONLY, IMPORT"
    )


def not_permitted(message: str) -> RegistryError:
    return RegistryError(422, 42205, message)


def reference_exists(subject: str, version: int) -> RegistryError:
    return RegistryError(
        422,
        42206,
        "One or more references exist to the schema "
        f"{{magic=1,keytype=SCHEMA,subject={subject},version={version}}}.",
    )


def invalid_subject(subject: str) -> RegistryError:
    return RegistryError(422, 42208, f"The specified subject '{subject[:100]}' is not valid.")


def incompatible(subject: str, messages: list[str]) -> RegistryError:
    details = ", ".join(messages)
    return RegistryError(
        409,
        409,
        f'Schema being registered is incompatible with an earlier schema for subject "{subject}"'
        f", details: [{details}]",
    )


def store_error(detail: str) -> RegistryError:
    return RegistryError(500, 50001, f"Error in the backend data store: {detail}")


def timed_out(detail: str) -> RegistryError:
    return RegistryError(500, 50002, f"Operation timed out: {detail}")


def forward_error(detail: str) -> RegistryError:
    return RegistryError(500, 50003, f"Error while forwarding the request to the primary: {detail}")


class NotPrimary(RegistryError):
    """This broker is not the registry's primary: a write is forwarded to it."""

    def __init__(self, detail: str = "this broker is not the registry's primary") -> None:
        super().__init__(500, 50003, f"Error while forwarding the request to the primary: {detail}")
