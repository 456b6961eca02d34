"""provisioner."""
