"""Test doubles that speak real wire formats (used by tests/ and benchmarks/)."""
