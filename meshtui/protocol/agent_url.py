"""What an agent URL must be: its host and path go into the request line and the ``host`` header
as they are, so the declaration refuses and the channel checks the same thing."""

from __future__ import annotations


def one_token(agent: str) -> bool:
    """True when an agent URL is printable ASCII without a space (one request-line token)."""
    return all("!" <= c <= "~" for c in agent)
