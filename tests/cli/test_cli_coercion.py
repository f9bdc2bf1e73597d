"""Plain parameter values read without pydantic convert exactly as typer's own adapters do.

Two checks: the same small command run by stock typer and by the CLI's ``CommandSet``
prints the same values and the same refusals (table-driven); and for any string, a plain
conversion either declines or gives what typer's adapter gives, value and type (property).
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from deepedge.cli.app import CommandSet
from deepedge.cli.coercion import DECLINED, plain_conversion
from deepedge.cli.render import OutputFormat

_coercion = pytest.importorskip("typer._coercion", reason="typer converts through pydantic")
runner = CliRunner()


class Mode(enum.Enum):
    FAST = "fast"
    Slow = "Slow"


def define(app: typer.Typer) -> None:
    @app.command()
    def show(
        s: str = "",
        n: int = 0,
        r: Annotated[int, typer.Option(min=1, max=10)] = 5,
        x: float = 0.5,
        b: bool = False,
        o: OutputFormat = OutputFormat.TABLE,
        m: Annotated[Mode, typer.Option(case_sensitive=True)] = Mode.FAST,
        p: str | None = None,
    ) -> None:
        for value in (s, n, r, x, b, o, m, p):
            typer.echo(f"{type(value).__name__} {value!r}")

    @app.command()
    def other() -> None:  # a second command: ``show`` stays a subcommand
        """Nothing."""


def stock_app() -> typer.Typer:
    app = typer.Typer()
    define(app)
    return app


def plain_app() -> typer.Typer:
    app = CommandSet()
    define(app)
    return app


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--s", "x y", "--p", ""],
        ["--s", " padded\t", "--p", "\n"],
        ["--s", "ünïcødé ☃", "--p", "-1"],
        ["--n", "42"],
        ["--n", "-0"],
        ["--n", "007"],
        ["--n", "+5"],
        ["--n", " 5"],
        ["--n", "5.0"],
        ["--n", "1_000"],
        ["--n", "9" * 30],
        ["--n", "abc"],
        ["--n", "0x10"],
        ["--n", ""],
        ["--r", "1"],
        ["--r", "10"],
        ["--r", "0"],
        ["--r", "11"],
        ["--r", "-3"],
        ["--x", "1.5"],
        ["--x", "-0"],
        ["--x", "-0.0"],
        ["--x", "1e3"],
        ["--x", "nan"],
        ["--x", "-inf"],
        ["--x", ".5"],
        ["--x", "0.1"],
        ["--x", "123456789.123456789123"],
        ["--x", "x"],
        ["--b"],
        ["--no-b"],
        ["--o", "wide"],
        ["--o", "JSON"],
        ["--o", "Yaml"],
        ["--o", "nope"],
        ["--o", ""],
        ["--m", "fast"],
        ["--m", "Slow"],
        ["--m", "FAST"],
        ["--m", "slow"],
    ],
)
def test_a_value_converts_and_is_refused_as_stock_typer_does(args: list[str]) -> None:
    stock = runner.invoke(stock_app(), ["show", *args])
    plain = runner.invoke(plain_app(), ["show", *args])
    assert (plain.exit_code, plain.stdout, plain.stderr) == (
        stock.exit_code,
        stock.stdout,
        stock.stderr,
    )
    assert stock.exit_code in {0, 2}, stock.output


def test_the_plain_app_converts_without_building_an_adapter() -> None:
    """The conversions are the plain ones: a valid value builds no pydantic adapter."""
    command = typer.main.get_command(plain_app()).commands["show"]
    ctx = command.make_context("show", ["--n", "3", "--x", "2.5", "--o", "json"])
    assert ctx.params["n"] == 3 and ctx.params["o"] is OutputFormat.JSON
    kinds = {p.name: type(p._runtime_param).__name__ for p in command.get_params(ctx)}
    assert {kinds[name] for name in "snrxbomp"} == {"PlainRuntimeParam"}


def adapter_result(descriptor: Any, value: str) -> tuple[str, str] | None:
    """What typer's own adapter makes of ``value``: (type, repr), or None when refused."""
    try:
        converted = _coercion.build_runtime_param(descriptor)._coerce_value(
            value, param=None, ctx=None
        )
    except typer.BadParameter:
        return None
    return type(converted).__name__, repr(converted)


DESCRIPTORS = {
    p.name: p.type_descriptor for p in typer.main.get_command(stock_app()).commands["show"].params
}
NUMBERISH = st.from_regex(r"\A[ +-]?[0-9_]{0,20}(\.[0-9]{0,20})?([eE][+-]?[0-9]{1,3})?\Z")


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(st.text(max_size=30), NUMBERISH), name=st.sampled_from("snrxom"))
def test_a_plain_conversion_declines_or_agrees_with_typer(value: str, name: str) -> None:
    descriptor = DESCRIPTORS[name]
    plain = plain_conversion(descriptor)
    assert plain is not None
    converted = plain(value, None)
    if converted is DECLINED:  # typer's adapter answers
        return
    assert adapter_result(descriptor, value) == (type(converted).__name__, repr(converted))
