"""Fixtures for the attacks: the provisioner's real PostgreSQL, and real unprivileged users."""

from tests.provisioner.conftest import mesh, pg  # noqa: F401  (fixtures)
from tests.security.fix_users import attacker, open_tmp  # noqa: F401  (fixtures)
