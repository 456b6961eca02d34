"""What an object-store consumer's ``values`` mean: its bucket(s) and its rights on them.

A consumer asks for ``bucket`` (one name) or ``buckets`` (names separated by spaces), default
one bucket derived from its login; and ``rights`` (``read``, ``write``, ``list``, ``tagging``,
separated by spaces), default ``read write list``. A right on anything but its own buckets is
refused: no wildcard, no ``admin``, and (checked across the declaration) no bucket another
consumer of the same store already has. A bucket another consumer held before (withdrawn, or
moved to another bucket), objects and all, is taken only when ``takes_over`` names it (one of
its own buckets, names separated by spaces): ``declare`` checks that against the inventory's
record of whose each bucket was. Pure functions, no I/O; the declaration and the adapter share
them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from meshtui.kinds.kind import ValuesError

REGION = "us-east-1"
"""The region requests are signed for (SeaweedFS accepts any; the AWS SDKs want one)."""
KNOWN_VALUES = frozenset({"bucket", "buckets", "rights", "takes_over"})
RIGHTS = {"read": "Read", "write": "Write", "list": "List", "tagging": "Tagging"}
"""The rights a consumer may ask for, and SeaweedFS's name for each."""
DEFAULT_RIGHTS = ("read", "write", "list")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_IP_LIKE = re.compile(r"\d+\.\d+\.\d+\.\d+")


@dataclass(frozen=True)
class Grant:
    """One identity's rights: the buckets it owns and what it may do in them."""

    buckets: tuple[str, ...]
    rights: tuple[str, ...]

    def actions(self) -> frozenset[str]:
        """The identity's actions as SeaweedFS stores them (``Read:bucket``, ...)."""
        return frozenset(f"{RIGHTS[r]}:{b}" for r in self.rights for b in self.buckets)

    def canonical(self) -> dict[str, str]:
        """The values that name exactly this grant (what the manifest carries)."""
        return {"buckets": " ".join(self.buckets), "rights": " ".join(self.rights)}


def default_bucket(login: str) -> str:
    """The bucket a consumer gets when it names none: its login, as a bucket name."""
    name = login.lower().replace("_", "-").strip("-.")
    name = re.sub(r"[^a-z0-9.-]", "-", name)[:63].rstrip("-.")
    return name if len(name) >= 3 else f"{name}-bucket"


def bucket_problem(name: str) -> str | None:
    """Why ``name`` is not a bucket a consumer may own, or None when it is."""
    if not _BUCKET.fullmatch(name):
        return (
            "a bucket name is 3 to 63 characters: lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit (no wildcard)"
        )
    if ".." in name or _IP_LIKE.fullmatch(name):
        return "a bucket name holds no '..' and is not an IP address"
    return None


def _words(key: str, text: str) -> tuple[str, ...]:
    items = tuple(text.split())
    if not items:
        raise ValuesError(f"{key} is empty")
    if len(set(items)) != len(items):
        raise ValuesError(f"{key} = {text!r} names one twice")
    return items


def grant_for(login: str, values: Mapping[str, str]) -> Grant:
    """The grant ``values`` ask for (defaults filled in), or ValuesError naming the key."""
    unknown = sorted(set(values) - KNOWN_VALUES)
    if unknown:
        raise ValuesError(
            f"{unknown[0]} is not an object-store value (known: {', '.join(sorted(KNOWN_VALUES))})"
        )
    if "bucket" in values and "buckets" in values:
        raise ValuesError("bucket and buckets are both given; keep one")
    if "bucket" in values:
        buckets: tuple[str, ...] = (values["bucket"],)
    elif "buckets" in values:
        buckets = _words("buckets", values["buckets"])
    else:
        buckets = (default_bucket(login),)
    for bucket in buckets:
        why = bucket_problem(bucket)
        if why is not None:
            raise ValuesError(f"bucket {bucket!r}: {why}")
    for taken in _words("takes_over", values["takes_over"]) if "takes_over" in values else ():
        if taken not in buckets:
            raise ValuesError(
                f"takes_over names {taken!r}, which is not one of this consumer's buckets "
                f"({' '.join(buckets)}); a consumer takes over only a bucket it names as its own"
            )
    rights = _words("rights", values["rights"]) if "rights" in values else DEFAULT_RIGHTS
    for right in rights:
        if right not in RIGHTS:
            raise ValuesError(
                f"right {right!r} is not one a consumer may have on its own bucket "
                f"(known: {', '.join(RIGHTS)}; admin rights are never granted)"
            )
    return Grant(buckets=buckets, rights=tuple(r for r in RIGHTS if r in rights))


def check_values(login: str, values: Mapping[str, str]) -> None:
    """The kind's ``values`` check at ``declare``: ValuesError for what cannot be granted."""
    grant_for(login, values)


def owned_buckets(login: str, values: Mapping[str, str]) -> tuple[str, ...]:
    """The buckets this consumer claims for itself alone (``declare`` refuses a second claim)."""
    return tuple(f"bucket {b!r}" for b in grant_for(login, values).buckets)


def taken_over(login: str, values: Mapping[str, str]) -> tuple[str, ...]:
    """The buckets (as :func:`owned_buckets` names them) this consumer takes over from whoever
    held them before, objects and all: what its ``takes_over`` names."""
    grant_for(login, values)  # takes_over names only its own buckets
    return tuple(f"bucket {b!r}" for b in values.get("takes_over", "").split())


def first_bucket(values: Mapping[str, str]) -> str:
    """The consumer's first named bucket; "" for the default one (:func:`default_bucket`)."""
    if values.get("bucket"):
        return values["bucket"]
    named = values.get("buckets", "").split()
    return named[0] if named else ""


def probed_bucket(login: str, values: Mapping[str, str]) -> str:
    """The bucket a probe lists: the consumer's first named bucket, else the default one of
    the pair's login (an alternating pair's owner: its access keys are not its name)."""
    return first_bucket(values) or default_bucket(login)
