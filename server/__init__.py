"""Litestar API, store, tool gateway and runtimes."""
