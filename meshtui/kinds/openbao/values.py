"""What an OpenBao consumer may ask for in ``values``: nothing. Its path in the KV mount is its
login, so no declaration can point one module at another's secrets. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping

from meshtui.kinds.kind import ValuesError


def check_values(login: str, values: Mapping[str, str]) -> None:
    """Refuse any value: an OpenBao pair's role, policy and path all follow from its login."""
    if values:
        raise ValuesError(
            f"an OpenBao pair takes no values ({', '.join(sorted(values))}): the module's "
            f"path is its login ({login}); remove values"
        )
