"""Receiving a delivery: credential files, the manifest and secret files written for the
provisioner, credentials written ahead of a rotation, running the provisioner. Imports state/,
policy/, the log and the contracts.
"""
