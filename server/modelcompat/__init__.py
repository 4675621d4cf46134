"""Which served models could share KV, computed from their directories (issue 14, item 3).

:func:`compatibility_matrix` reads each model's ``config.json``, tokenizer and safetensors
weights (streamed tensor by tensor, cached by the directory's fingerprint) and says, for each
pair, how many leading layers have identical KV for the same tokens. An analysis only: no
engine shares KV across models (``ENABLED`` is False).
"""

from agentconsole.server.modelcompat.digest import ModelDigest, clear_cache, model_digest
from agentconsole.server.modelcompat.matrix import (
    ENABLED,
    NOTE,
    CompatMatrix,
    ModelInfo,
    PairCompat,
    compare,
    compatibility_matrix,
)

__all__ = [
    "ENABLED",
    "NOTE",
    "CompatMatrix",
    "ModelDigest",
    "ModelInfo",
    "PairCompat",
    "clear_cache",
    "compare",
    "compatibility_matrix",
    "model_digest",
]
