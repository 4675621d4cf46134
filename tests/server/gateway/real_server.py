"""The real server app (``server.app.create_app``, simulated runtime) with the gateway mounted
as an extension, for running the gateway's HTTP tests against it.

Run as ``python -m tests.server.gateway.real_server --db D --ledger L``; prints ``READY
<port>`` once it serves. Keys as :mod:`tests.server.gateway.mini_server`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentconsole.server.api.config import ServerConfig
from agentconsole.server.app import create_app
from agentconsole.server.gateway import GatewayConfig, GatewayExtension
from tests.server.gateway.mini_server import KEYS, serve_on_free_port


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--ledger", type=Path, required=True)
    args = parser.parse_args()
    config = ServerConfig(
        db_path=args.db,
        runtime="sim",
        tenant_keys={k: t for k, (t, operator) in KEYS.items() if not operator},
        operator_keys=tuple(k for k, (_, operator) in KEYS.items() if operator),
    )
    gateway = GatewayConfig(
        ledger_path=args.ledger, tenant_builtins=None, allow_private_executor_urls=True
    )
    app = create_app(config, extensions=[GatewayExtension(gateway)])
    serve_on_free_port(app)


if __name__ == "__main__":
    main()
