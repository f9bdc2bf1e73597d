"""Run the service: ``python -m deepedge.api.server --data-dir D [--db URL] [--port P]``.

Loopback by default; the CLI's ``deepedge serve`` calls :func:`serve`.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import uvicorn

from deepedge.api.app import create_app
from deepedge.service.config import ServiceSettings


def serve(settings: ServiceSettings, host: str = "127.0.0.1", port: int = 8750) -> None:
    app = create_app(settings)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="deepedge-server")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--db", default=None, help="database URL (default: SQLite in data-dir)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8750)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    serve(ServiceSettings(data_dir=args.data_dir, database_url=args.db), args.host, args.port)


if __name__ == "__main__":
    main()
