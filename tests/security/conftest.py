"""The provisioner's real-PostgreSQL fixtures, for the attacks on the provisioner."""

from tests.provisioner.conftest import mesh, pg  # noqa: F401  (fixtures)
