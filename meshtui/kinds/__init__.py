"""Provider kinds: one package per kind (``postgres/``, ``redis/``, ...), one registry
(``registry.py``) that maps a declared ``kind`` to its record (``kind.py``).

Importing this package imports nothing; ask :mod:`meshtui.kinds.registry`.
"""
