"""The typer applications, the table of ``deepedge``'s commands, and the one place where
errors become exit codes.

Command modules (``deepedge.cli.<concept>``) add their commands to these apps; the CLI only
parses, calls library code and renders. :data:`COMMANDS` names every top-level command, the
modules that register it and the line ``deepedge --help`` shows for it: a command's module
is imported the first time that command is asked for, so ``deepedge jobs list`` (or a TAB
completion) never imports the planners, torch or Ray that other commands use.
"""

from __future__ import annotations

import errno
import importlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeGuard, TypeVar

import typer
import typer.core
import typer.main

from deepedge.cli.coercion import lighten
from deepedge.core.errors import DeepEdgeError, InvalidInputError, describe_validation_error

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

# Help is click's own formatter (rich_markup_mode=None): it wraps at the terminal's width and
# never cuts a word short, where rich's option tables ellipsised paths at 80 columns.
HELP_SETTINGS: dict[str, Any] = {"max_content_width": 120, "help_option_names": ["--help", "-h"]}
DEBUG_ENV = "DEEPEDGE_DEBUG"  # set: an internal error shows its traceback

# click's exceptions, of whichever click typer runs on (newer typers vendor their own)
_CLICK = {cls.__name__: cls for cls in typer.BadParameter.__mro__}
UsageError: type[Exception] = _CLICK["UsageError"]
ClickException: type[Exception] = _CLICK["ClickException"]


@dataclass(frozen=True)
class Entry:
    """A top-level command or group, known before its module is imported."""

    summary: str  # its line in ``deepedge --help`` and in completion (its help's first sentence)
    modules: tuple[str, ...]  # the deepedge.cli modules that register it, all imported first


COMMANDS: dict[str, Entry] = {
    "agent": Entry(
        "Join a Ray cluster as a deepedge node and report its state on a heartbeat.", ("agent",)
    ),
    "camera": Entry(
        "Stream a workload's windows as live requests to an endpoint (one image per request, "
        "binary tensors); print what each window was answered (progress on stderr).",
        ("serving",),
    ),
    "context": Entry(
        "Where the client commands find the service, and with which token.", ("service",)
    ),
    "demo": Entry(
        "Run the continuous-learning loop end to end and write a report (``--site``: the "
        "control plane with its dashboard, drift, updates and an automatic rollback).",
        ("demo",),
    ),
    "deploy": Entry(
        "Create a deployment from FILE.yaml (or JSON); the same file again is a no-op.",
        ("deployments",),
    ),
    "deployments": Entry(
        "Watch and control deployments on a running service.",
        ("deployments", "serving", "samples"),
    ),
    "ekya": Entry(
        "Run the edge server live: per window, micro-profile, plan, retrain, hot-load; print "
        "what each window did.",
        ("edge",),
    ),
    "jobs": Entry("Submit, watch and control jobs on a running service.", ("jobs",)),
    "models": Entry(
        "The model registry: every deployment's model versions and their lineage.",
        ("deployments",),
    ),
    "nodes": Entry(
        "The site's nodes: device, state and load; with -o wide their Ray nodes and what runs "
        "on each.",
        ("nodes",),
    ),
    "perfmodels": Entry(
        "Learned performance models (the planner's estimators, fitted from a profile): fit, "
        "report, schemas.",
        ("profile",),
    ),
    "plan": Entry(
        "Pure planners: read a problem document, print a decision.", ("place", "shard", "window")
    ),
    "profile": Entry(
        "Profile this host under stress and write the dataset (Deep-Edge Section IV-B1).",
        ("profile",),
    ),
    "profile-node": Entry(
        "Ask a node's agent to profile its device and fit its device type's learned models "
        "(minutes: the time it has taken is shown on stderr).",
        ("agent",),
    ),
    "serve": Entry(
        "Run the job service (REST API, lifecycle manager, dashboard, data plane) until "
        "interrupted.",
        ("service",),
    ),
    "simulate": Entry("Trace-driven simulators.", ("window",)),
    "tenants": Entry("Manage tenants of a service's store.", ("service", "tenants")),
    "tokens": Entry("Your tenant's API tokens on a running service.", ("tenants",)),
    "update": Entry(
        "Retrain the workload's model once on a cluster and print what happened.", ("update",)
    ),
    "version": Entry("Print the deepedge version.", ()),
    "workload": Entry("Workloads: the user's model, data and labeller.", ("workload",)),
}


class PlainCommand(typer.core.TyperCommand):
    """A command whose parameters read plain values (a string, a number, a choice) without
    typer's pydantic adapters (:mod:`deepedge.cli.coercion`): what a TAB and a client
    command cost is mostly that import."""

    def get_params(self, ctx: Any) -> list[Any]:
        return lighten(super().get_params(ctx))


class HelpGroup(typer.core.TyperGroup):
    """A command group whose command list wraps each command's first sentence instead of
    cutting it at the terminal's width (click's default ends it with "..."), and whose
    parameters read plain values as :class:`PlainCommand`'s do."""

    def get_params(self, ctx: Any) -> list[Any]:
        return lighten(super().get_params(ctx))

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class LazyGroup(HelpGroup):
    """The ``deepedge`` group: each command of :data:`COMMANDS` is built from its modules the
    first time it is asked for. Listing the commands (``--help``, completion of a command
    name) shows their summaries and imports nothing; any usage error is one ``error:`` line
    (exit status 2), and an internal error one line too (exit status 1; ``DEEPEDGE_DEBUG=1``
    shows the traceback)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._built: set[str] = set()
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in COMMANDS and cmd_name not in self._built:
            if self._listing:
                return typer.core.TyperCommand(name=cmd_name, help=COMMANDS[cmd_name].summary)
            built = build_command(cmd_name)
            if built is not None:
                self.commands[cmd_name] = built
            self._built.add(cmd_name)
        return self.commands.get(cmd_name)

    @contextmanager
    def _names_only(self) -> Iterator[None]:
        self._listing = True
        try:
            yield
        finally:
            self._listing = False

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        with self._names_only():
            super().format_commands(ctx, formatter)

    def shell_complete(self, ctx: Any, incomplete: str) -> Any:
        with self._names_only():
            return super().shell_complete(ctx, incomplete)

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with _usage_error_in_one_line():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        with _usage_error_in_one_line():
            try:
                return super().invoke(ctx)
            except (ClickException, typer.Exit, typer.Abort, EOFError):
                raise
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # typer's own handling: a closed pipe, quietly
                    raise
                if exc.filename is not None and exc.errno in _BAD_PATH:
                    name = str(exc.filename)
                    shown = name if len(name) <= 80 else name[:80] + "..."
                    raise fail(f"{shown}: {exc.strerror}", InvalidInputError.exit_code) from None
                raise _internal(exc) from None
            except Exception as exc:
                raise _internal(exc) from None


# A file or folder given on the command line that cannot be used: bad input (exit status 2).
_BAD_PATH = {errno.ENOENT, errno.ENAMETOOLONG, errno.EACCES, errno.EPERM, errno.EISDIR,
             errno.ENOTDIR, errno.EEXIST, errno.EROFS, errno.ELOOP, errno.ENOTEMPTY}  # fmt: skip


class OneLineUsageError(UsageError):  # type: ignore[misc,valid-type]
    """A usage error (unknown option, bad or missing value) shown as one line."""

    def show(self, file: Any = None) -> None:
        ctx = getattr(self, "ctx", None)
        hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        typer.echo(f"error: {_one_line(self.format_message())}{hint}", err=True)


@contextmanager
def _usage_error_in_one_line() -> Iterator[None]:
    try:
        yield
    except OneLineUsageError:
        raise
    except UsageError as exc:
        raise OneLineUsageError(exc.format_message(), exc.ctx) from None  # type: ignore[attr-defined]


def _internal(exc: Exception) -> Exception:
    """A bug met by a command: one line (exit status 1) unless DEEPEDGE_DEBUG asks for the
    traceback."""
    if os.environ.get(DEBUG_ENV):
        return exc
    typer.echo(
        f"error: internal error ({type(exc).__name__}: {_one_line(str(exc))[:300]}); "
        f"{DEBUG_ENV}=1 shows the traceback",
        err=True,
    )
    return typer.Exit(code=1)


def _one_line(message: str) -> str:
    return " ".join(message.split())


def command_name(info: Any) -> str:
    """The name typer gives a registered command: its own, else its function's."""
    return str(info.name or info.callback.__name__.lower().replace("_", "-"))


def build_command(name: str) -> Any:
    """The click command of ``COMMANDS[name]``, built after importing its modules."""
    for module in COMMANDS[name].modules:
        importlib.import_module(f"deepedge.cli.{module}")
    holder = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)
    holder.registered_groups = [g for g in app.registered_groups if g.name == name]
    holder.registered_commands = [c for c in app.registered_commands if command_name(c) == name]
    return typer.main.get_group(holder).commands.get(name)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit()


def version_line() -> str:
    from deepedge import __version__

    return f"deepedge {__version__}"


F = TypeVar("F", bound=Callable[..., Any])


class CommandSet(typer.Typer):
    """A typer app whose commands are of :class:`PlainCommand` unless they name a class."""

    def command(
        self,
        name: str | None = None,
        *,
        cls: type[typer.core.TyperCommand] | None = None,
        **kwargs: Any,
    ) -> Callable[[F], F]:
        return super().command(name, cls=cls or PlainCommand, **kwargs)


app = CommandSet(
    name="deepedge",
    cls=LazyGroup,
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


def group(name: str) -> typer.Typer:
    """The command group ``name`` of the ``deepedge`` app (its help: its :data:`COMMANDS`
    summary), with the app's help conventions; shared by the modules that add to it."""
    for registered in app.registered_groups:
        if registered.name == name and registered.typer_instance is not None:
            return registered.typer_instance
    sub = CommandSet(
        help=COMMANDS[name].summary,
        cls=HelpGroup,
        no_args_is_help=True,
        rich_markup_mode=None,
        context_settings=HELP_SETTINGS,
    )
    app.add_typer(sub, name=name)
    return sub


M = TypeVar("M", bound="BaseModel")

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
    typer.echo(f"error: {_one_line(message)}", err=True)
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
    from pydantic import ValidationError

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
    except Exception as exc:
        if not _is_validation_error(exc):
            raise
        raise fail(describe_validation_error(exc), 2) from None


def _is_validation_error(exc: Exception) -> TypeGuard[ValidationError]:
    """pydantic's ValidationError, without importing pydantic: a command that never loaded
    it cannot have raised one."""
    pydantic_core = sys.modules.get("pydantic_core")
    return pydantic_core is not None and isinstance(exc, pydantic_core.ValidationError)


def echo_json(payload: Any) -> None:
    if hasattr(payload, "model_dump_json"):
        sys.stdout.write(payload.model_dump_json(indent=2) + "\n")
    else:
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")


@app.command()
def version() -> None:
    """Print the deepedge version."""
    typer.echo(version_line())
