"""PostgreSQL fixtures (filled in by the provisioner work)."""
