"""The protocol: what the controller, the host agent and the provisioner agree on — the signed
envelope (``wire``), every request and answer (``messages``) and the manifest's shape. Imports
the core only.
"""
