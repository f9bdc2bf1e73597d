"""The ``deepedge`` command line. Each concept's commands live in their own module, imported
the first time one of its commands is asked for (:data:`deepedge.cli.app.COMMANDS`)."""

from __future__ import annotations

from deepedge.cli.app import app


def main() -> None:
    app(prog_name="deepedge")


__all__ = ["app", "main"]
