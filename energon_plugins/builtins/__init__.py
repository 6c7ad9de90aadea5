"""Hook implementations that register the core's built-in components (via entry points)."""
