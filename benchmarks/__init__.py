"""Benchmarks of asgi_ratelimit against its peers: run ``./benchmarks/run`` (see README.md)."""
