"""Who a connection is, as Kafka's DefaultKafkaPrincipalBuilder names it: `User:NAME` for a
SASL user, `User:<mapped certificate subject>` for a TLS client certificate, and
`User:ANONYMOUS` otherwise.

A certificate's subject (RFC 2253, most specific attribute first: `CN=alice,OU=eng,O=acme`)
goes through `ssl.principal.mapping.rules`, Kafka's list of

    RULE:<pattern>/<replacement>/[L|U]     the first rule whose pattern matches the whole
                                           subject wins; $1.. in the replacement are its
                                           groups; L or U lower- or upper-cases the result
    DEFAULT                                the subject as it is

e.g. `RULE:^CN=(.*?),OU=(.*?)$/$1/L,DEFAULT`. No rule matching is an error, as in Kafka.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"
# Kafka's SslPrincipalMapper.RULE_PARSER, in Python's syntax.
_RULE = re.compile(
    r"\s*(?:RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)|(DEFAULT))\s*(?:,|$)"
)


class PrincipalRuleError(ValueError):
    pass


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        match = self.pattern.fullmatch(name)
        if match is None:
            return None
        result = match.expand(self.replacement)
        if self.case == "L":
            return result.lower()
        return result.upper() if self.case == "U" else result


def _java_replacement(text: str) -> str:
    # Java's $1 is Python's \g<1>; a backslash escapes the next character in both.
    return re.sub(r"\$(\d+)", r"\\g<\1>", text)


def parse_rules(text: str | None) -> tuple[_Rule, ...]:
    text = (text or "DEFAULT").strip()
    rules: list[_Rule] = []
    pos = 0
    while pos < len(text):
        match = _RULE.match(text, pos)
        if match is None or match.end() == pos:
            raise PrincipalRuleError(f"ssl.principal.mapping.rules: cannot read {text[pos:]!r}")
        pos = match.end()
        if match.group(4):
            rules.append(_Rule(None))
            continue
        try:
            pattern = re.compile(match.group(1))
        except re.error as exc:
            raise PrincipalRuleError(f"ssl.principal.mapping.rules: {exc}") from None
        rules.append(_Rule(pattern, _java_replacement(match.group(2)), match.group(3)))
    return tuple(rules)


class PrincipalMapper:
    def __init__(self, rules: str | None = None) -> None:
        self.rules = parse_rules(rules)

    def from_subject(self, subject: str) -> str:
        for rule in self.rules:
            name = rule.apply(subject)
            if name is not None:
                return f"User:{name}"
        raise PrincipalRuleError(f"no ssl.principal.mapping.rules rule matches {subject}")
