"""The benchmark, outside the engine: python -m bench (see __main__.py)."""
