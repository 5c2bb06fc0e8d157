"""The Textual application (filled in by the dashboard)."""
