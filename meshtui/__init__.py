"""meshtui: the operator's console for the credentials of a small service mesh."""

__version__ = "0.1.0"
