"""PostgreSQL's provisioner side (its adapter, pg_hba pinning, SCRAM, quiet logging) runs on
the provisioner's fixtures: a provider folder beside each server version."""

from tests.provisioner.conftest import mesh, pg  # noqa: F401  (fixtures)
