"""The dependable multi-tenant job service: durable store, lifecycle, guardian, recovery."""
