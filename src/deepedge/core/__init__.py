"""Shared foundations: typed errors, ids, units, clock."""
