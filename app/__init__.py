"""agentconsole: program-aware serving for LLM agents, with an operations console.

This folder (``app/``) is the composition root and the top of the ``agentconsole`` namespace;
the other folders of the repository are its subpackages (see ``setup.py``).
"""

__version__ = "0.1.0"
