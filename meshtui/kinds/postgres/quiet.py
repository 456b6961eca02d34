"""Keep a SCRAM verifier out of everything PostgreSQL could record about a statement.

A verifier is a secret: with one sniffed login it lets anyone log in. It travels in exactly one
statement per write, and that statement runs in a transaction in which a statement before it
lowered, by ``SET LOCAL`` (``set_config(..., true)``), every setting that could print or keep
its text or its parameters: statement, duration and sample logging, the statement attached to an
error, parameter logging, the parse-tree debug output, ``auto_explain``, ``pg_stat_statements``
and ``pg_stat_activity``'s copy of the running statement. (A cancelled statement prints its text
only as the statement of an error, which is lowered; the nested one's error context is dropped
by the function that runs it.) A superuser lowers them all. An admin that is not a superuser
lowers what it may (user settings and those it was granted ``SET`` on); any setting that stays
loud *and* would expose the verifier on its path is named in :attr:`QuietPlan.unlowered`, and no
verifier is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

# (setting, the value that makes it quiet)
LOWER: tuple[tuple[str, str], ...] = (
    ("log_statement", "none"),
    ("log_min_duration_statement", "-1"),
    ("log_min_duration_sample", "-1"),
    ("log_transaction_sample_rate", "0"),
    ("log_min_error_statement", "panic"),
    ("log_parameter_max_length", "0"),
    ("log_parameter_max_length_on_error", "0"),
    ("debug_print_parse", "off"),
    ("debug_print_rewritten", "off"),
    ("debug_print_plan", "off"),
    ("track_activities", "off"),
    ("auto_explain.log_min_duration", "-1"),
    ("auto_explain.log_parameter_max_length", "0"),
    ("pg_stat_statements.track", "none"),
    ("pg_stat_statements.track_utility", "off"),
)

_SETTINGS = """
SELECT name, setting, context = 'user' OR {privileged}
FROM pg_settings WHERE name = ANY(%s)
"""


@dataclass(frozen=True)
class QuietPlan:
    """The ``SET LOCAL`` statement for this session, and what it cannot lower (``name=value``)."""

    statement: str
    unlowered: tuple[str, ...]


def _exposes(name: str, value: str, after: dict[str, str]) -> bool:
    """Whether a setting left at ``value`` would show the verifier on the parameter path.

    The path of an admin that is not a superuser: the verifier is a bind parameter of a
    top-level SELECT, and the statement that carries it runs nested, inside a function.
    """
    params = after.get("log_parameter_max_length", "0") != "0"
    if name == "log_statement":
        return value == "all" and params
    if name in ("log_min_duration_statement", "log_min_duration_sample"):
        return value != "-1" and params
    if name == "log_transaction_sample_rate":
        return value not in ("0", "0.0") and params
    if name == "auto_explain.log_min_duration":
        return value != "-1"  # verbose plans show a call's arguments, even on 15
    if name == "pg_stat_statements.track":
        return value == "all" and after.get("pg_stat_statements.track_utility") == "on"
    if name == "log_parameter_max_length_on_error":
        return value != "0"
    return False  # the rest print only the top-level text, which holds "$1" and no secret


def quiet_plan(conn: psycopg.Connection[Any], *, superuser: bool, version: int) -> QuietPlan:
    """What this session can lower before a verifier is sent (read once per session)."""
    query, params = quiet_query(superuser=superuser, version=version)
    return plan_of(conn.execute(query, params).fetchall(), superuser=superuser)


def quiet_query(*, superuser: bool, version: int) -> tuple[str, list[Any]]:
    """The read behind :func:`quiet_plan` (to send it with other reads), and its parameters."""
    privileged = "has_parameter_privilege(name, 'SET')" if version >= 150000 else "false"
    return _SETTINGS.format(privileged="true" if superuser else privileged), [[n for n, _ in LOWER]]


def plan_of(rows: Sequence[Any], *, superuser: bool) -> QuietPlan:
    """The plan from the rows :func:`quiet_query` read."""
    wanted = dict(LOWER)
    after: dict[str, str] = {}
    lower: list[tuple[str, str]] = []
    stuck: list[tuple[str, str]] = []
    for name, value, settable in rows:
        quiet = wanted[name]
        if superuser or (settable and value != quiet):
            lower.append((name, quiet))
            after[name] = quiet
        else:
            after[name] = str(value)
            if value != quiet:
                stuck.append((name, str(value)))
    unlowered = tuple(f"{n}={v}" for n, v in stuck if _exposes(n, v, after))
    calls = ", ".join(
        f"set_config('{name}', '{value}', true)" for name, value in sorted(lower)
    )  # names and values are the constants above, never input
    return QuietPlan(statement=f"SELECT {calls}" if calls else "SELECT", unlowered=unlowered)
