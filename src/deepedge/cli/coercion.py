"""Parameter values read without pydantic where the answer is plain; typer's own otherwise.

typer (0.2x) converts each parameter's value through a pydantic TypeAdapter built the first
time the parameter is parsed, so a TAB completion imports pydantic to pass ``None`` through
and ``deepedge jobs list`` to read ``50`` as an int: most of their CPU time. :func:`lighten`
gives a command's parameters a conversion that answers these cases itself and hands every
other value to the adapter typer would have used, built then: every value converts to what
typer's gives, and every refusal is typer's own message.

Answered here, by annotation (anything else, or any value not matched, goes to typer):

- ``str``: a ``str`` is itself;
- ``bool``: a ``bool`` is itself;
- ``int`` (no ``clamp``): an ``int``, or ``-?[0-9]{1,18}``, within ``min``/``max``;
- ``float`` (no ``clamp``): a ``float``, or ``-?D(.D)?`` with D = ``[0-9]{1,18}``, within
  ``min``/``max``;
- an ``Enum``: the member typer's own choice matching (``coerce_cli_choice``) finds.

``None`` never reaches a conversion: typer's ``RuntimeParam.coerce`` answers it itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

DECLINED = object()  # what a plain conversion returns for a value typer's adapter must read
_INT = re.compile(r"-?[0-9]{1,18}")
_DECIMAL = re.compile(r"-?[0-9]{1,18}(?:\.[0-9]{1,18})?")

Plain = Callable[[Any, Any], Any]  # (value, click context) -> the value, or DECLINED

try:
    from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
    from typer._param_types import coerce_cli_choice
except ImportError:  # a typer before 0.2x converts through click's types: nothing to lighten
    _ADAPTED = False
else:
    _ADAPTED = True

    @dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):
        """A parameter's conversion: ``plain`` first, typer's adapter when it declines."""

        descriptor: TypeDescriptor
        plain: Plain

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            converted = self.plain(value, ctx)
            if converted is not DECLINED:
                return converted
            adapted = build_runtime_param(self.descriptor)
            param._runtime_param = adapted  # later values go to the adapter directly
            return adapted._coerce_value(value, param=param, ctx=ctx)


def lighten(params: list[Any]) -> list[Any]:
    """``params`` (a command's, as ``get_params`` gives them), each typer parameter not yet
    converted given the plain conversion of its annotation (see the module's docstring)."""
    if not _ADAPTED:
        return params
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is None or getattr(param, "_runtime_param", DECLINED) is not None:
            continue  # not typer's, or already converting
        plain = plain_conversion(descriptor)
        if plain is not None:
            param._runtime_param = PlainRuntimeParam(
                annotation=descriptor.annotation,
                parameter_info=descriptor.parameter_info,
                descriptor=descriptor,
                plain=plain,
            )
    return params


def plain_conversion(descriptor: Any) -> Plain | None:
    """The plain conversion of a typer parameter's annotation, or None when it has none."""
    info = descriptor.parameter_info
    annotation = descriptor.annotation
    if info.parser is not None or descriptor.file_annotation is not None:
        return None
    if annotation is str:
        return _same_type(str)
    if annotation is bool:
        return _same_type(bool)
    if annotation in (int, float) and not info.clamp:
        return _number(annotation, info.min, info.max)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _choice(tuple(annotation), bool(info.case_sensitive))
    return None


def _same_type(kind: type) -> Plain:
    def convert(value: Any, ctx: Any) -> Any:
        return value if type(value) is kind else DECLINED

    return convert


def _number(kind: type[int] | type[float], low: float | None, high: float | None) -> Plain:
    pattern = _INT if kind is int else _DECIMAL

    def convert(value: Any, ctx: Any) -> Any:
        if type(value) is kind:
            number = value
        elif type(value) is str and pattern.fullmatch(value):
            number = kind(value)
        else:
            return DECLINED
        if (low is not None and not number >= low) or (high is not None and not number <= high):
            return DECLINED  # out of range (or NaN): typer's message says which bound
        return number

    return convert


def _choice(choices: tuple[Any, ...], case_sensitive: bool) -> Plain:
    def convert(value: Any, ctx: Any) -> Any:
        try:
            return coerce_cli_choice(value, choices=choices, case_sensitive=case_sensitive, ctx=ctx)
        except ValueError:
            return DECLINED  # no such member: typer's adapter words the refusal

    return convert
