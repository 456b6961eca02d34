"""tui/widgets."""
