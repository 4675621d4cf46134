"""Several SGLang servers behind sglang-router, driven as one runtime (``sglang-router``).

``node_api``: the plugin's small HTTP endpoint inside each worker; ``workers``: the control
plane's client of every worker; ``completions``: a call as a ``/v1/completions`` request and
its stream; ``runtime``: the ``Runtime``; ``launch``: the commands that start a worker and the
router (docs/DEPLOY.md).
"""
