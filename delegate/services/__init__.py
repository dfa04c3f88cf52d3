"""Services: each combines the adapters (registry, audit, bus) for one user-facing operation."""
