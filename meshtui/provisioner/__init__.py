"""The provisioner: make the grants a manifest delivers true in the provider's software.

``manifest`` reads mesh.json, ``harness`` decides and drives (``reconcile``, ``watch``),
``adapter`` is the contract every kind's adapter implements (the adapters live in their kinds'
packages, meshtui/kinds/<kind>/adapter.py, found through meshtui.kinds.registry), ``files``
reads by descriptor. It knows only the manifest and its secret files: it never imports the
controller, the inventory or the TUI.
"""
