"""Development tools shared by tests/ and benchmarks/ (not packaged: see pyproject.toml)."""
