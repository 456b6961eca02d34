"""Network-namespace fixtures (filled in by the lab work)."""
