"""Runtimes behind one protocol: SGLang in-process and the simulated engine."""
