"""The typer applications and the one place where errors become exit codes.

Command modules (``deepedge.cli.<concept>``) add their commands to these apps; the CLI only
parses, calls library code and renders.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import typer.core
from pydantic import BaseModel, ValidationError

from deepedge.core.errors import DeepEdgeError, InvalidInputError, describe_validation_error

# Help is click's own formatter (rich_markup_mode=None): it wraps at the terminal's width and
# never cuts a word short, where rich's option tables ellipsised paths at 80 columns.
HELP_SETTINGS: dict[str, Any] = {"max_content_width": 120, "help_option_names": ["--help", "-h"]}


class HelpGroup(typer.core.TyperGroup):
    """A command group whose command list wraps each command's first sentence instead of
    cutting it at the terminal's width (click's default ends it with "...")."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _show_version(value: bool) -> None:
    if value:
        from deepedge import __version__

        typer.echo(f"deepedge {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="deepedge",
    cls=HelpGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=HELP_SETTINGS,
)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
) -> None:
    """Keep deep-learning models accurate at the edge.

    Commands that talk to a running service find it through --url/--token,
    DEEPEDGE_URL/DEEPEDGE_TOKEN, or the context that `deepedge serve` and
    `deepedge demo --site` write (`deepedge context show`).
    """


def group(name: str, help_text: str) -> typer.Typer:
    """A command group of the ``deepedge`` app, with the app's help conventions; a group
    that another module registered first under ``name`` is shared."""
    for registered in app.registered_groups:
        if registered.name == name and registered.typer_instance is not None:
            return registered.typer_instance
    sub = typer.Typer(
        help=help_text,
        cls=HelpGroup,
        no_args_is_help=True,
        rich_markup_mode=None,
        context_settings=HELP_SETTINGS,
    )
    app.add_typer(sub, name=name)
    return sub


plan_app = group("plan", "Pure planners: read a problem document, print a decision.")

M = TypeVar("M", bound=BaseModel)

RayAddress = Annotated[
    str | None,
    typer.Option(
        "--address",
        envvar="RAY_ADDRESS",
        help="Ray cluster to connect to (its head's host:port); default: an embedded local Ray",
    ),
]


def fail(message: str, exit_code: int) -> typer.Exit:
    """Print one line to stderr and return the Exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=exit_code)


def check_number(
    value: float | None,
    flag: str,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
) -> None:
    """A float option must be finite and in range (``None`` means not given).

    Written so that NaN, which fails every comparison, fails the check too.
    """
    if value is None:
        return
    ok = math.isfinite(value)
    ok = ok and (gt is None or value > gt) and (ge is None or value >= ge)
    ok = ok and (le is None or value <= le)
    if not ok:
        limits = ((">", gt), (">=", ge), ("<=", le))
        rule = " and ".join(f"{op} {bound:g}" for op, bound in limits if bound is not None)
        raise InvalidInputError(
            f"{flag} must be a finite number{' ' + rule if rule else ''}, got {value}",
            field=flag.lstrip("-").replace("-", "_"),
        )


def read_structured(path: Path) -> Any:
    """A JSON (or, by suffix, YAML) file's content; every failure is an InvalidInputError."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror}", field=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path} is not UTF-8 text: {exc.reason}", field=str(path)) from exc
    try:
        if path.suffix in {".yaml", ".yml"}:
            import yaml

            document = yaml.safe_load(text)
        else:
            document = json.loads(text)
    except Exception as exc:  # any parse failure is bad input
        raise InvalidInputError(f"{path} is not valid JSON/YAML: {exc}", field=str(path)) from exc
    where = _non_finite(document)
    if where is not None:  # YAML's .nan / .inf, JSON's NaN: no document field takes them
        field = where or "<document>"
        raise InvalidInputError(f"{path}: {field} is not a finite number", field=field)
    return document


def _non_finite(value: Any, where: str = "") -> str | None:
    """The dotted path of the first NaN or infinity in a decoded document, else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        found = _non_finite(item, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def load_document(path: Path, model: type[M]) -> M:
    """Read a JSON (or YAML) file and validate it; every failure is an InvalidInputError."""
    raw = read_structured(path)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise InvalidInputError(describe_validation_error(exc)) from exc


def run_guarded(fn: Callable[[], Any]) -> Any:
    """Call ``fn``; map typed errors to one-line messages and their exit codes."""
    try:
        return fn()
    except DeepEdgeError as exc:
        raise fail(exc.message, exc.exit_code) from None
    except ValidationError as exc:
        raise fail(describe_validation_error(exc), 2) from None


def echo_json(payload: Any) -> None:
    if isinstance(payload, BaseModel):
        sys.stdout.write(payload.model_dump_json(indent=2) + "\n")
    else:
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")


@app.command()
def version() -> None:
    """Print the deepedge version."""
    from deepedge import __version__

    typer.echo(__version__)
