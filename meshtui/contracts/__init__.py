"""What a kind implements: the provisioner's adapter, the loan of a kept admin session, the parsed
manifest and the provider's files it is given, the probe's types and its target gate. Imports
the core and the protocol only; kinds, the agent and the provisioner import it.
"""
