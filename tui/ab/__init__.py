"""A/B runs: plans, comparison, tuning journal and the orchestrator (core, no Textual)."""
