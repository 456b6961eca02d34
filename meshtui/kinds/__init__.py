"""Provider kinds: one package each (PostgreSQL, Redis, OpenBao, ...)."""
