"""Server profiles, presets and the command builder (TOML)."""
