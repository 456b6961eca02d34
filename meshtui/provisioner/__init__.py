"""The provisioner: make the grants a manifest delivers true in the provider's software.

``manifest`` reads mesh.json, ``harness`` decides and drives (``reconcile``, ``watch``),
``adapter`` is the contract, ``postgres`` the built-in PostgreSQL adapter, ``scram`` the
client-side verifiers. It knows only the manifest and its secret files: it never imports the
controller, the inventory or the TUI.
"""
