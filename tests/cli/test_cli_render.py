"""The CLI's one output module: human times, cells, tables and the machine formats."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from deepedge.cli import render
from deepedge.cli.render import Column, OutputFormat

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0.25, "250ms"),
        (0.0, "0ms"),
        (42.4, "42s"),
        (59.6, "1m00s"),
        (185, "3m05s"),
        (2 * 3600 + 4 * 60 + 10, "2h04m"),
        (3 * 86400 + 2 * 3600, "3d02h"),
        (None, "-"),
        (float("nan"), "-"),
    ],
)
def test_duration_reads_as_a_person_would_say_it(seconds: float | None, expected: str) -> None:
    assert render.duration(seconds) == expected


@pytest.mark.parametrize(
    ("age_s", "expected"),
    [(5, "5s"), (59.9, "59s"), (60, "1m"), (3599, "59m"), (3600, "1h"), (86400 * 2, "2d")],
)
def test_ago_is_a_kubectl_style_age(age_s: float, expected: str) -> None:
    assert render.ago(NOW - age_s, now=NOW) == expected


def test_ago_of_a_future_time_is_zero_and_of_nothing_a_dash() -> None:
    assert render.ago(NOW + 30, now=NOW) == "0s"
    assert render.ago(None) == "-"


def test_when_is_a_local_time_with_its_age() -> None:
    shown = render.when(NOW - 180, now=NOW)
    assert shown.endswith("(3m ago)")
    assert shown[:4].isdigit() and "." not in shown  # never epoch seconds


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "-"),
        ("", "-"),
        (True, "yes"),
        (False, "no"),
        (0.91234, "0.912"),
        (8.0, "8"),  # a whole number printed 8.000 before
        (-2.0, "-2"),
        (float("inf"), "inf"),
        (3, "3"),
        ([1, 2], "1, 2"),
        ([], "-"),
    ],
)
def test_cells(value: Any, expected: str) -> None:
    assert render.text(value) == expected


@pytest.mark.parametrize(
    ("fn", "value", "expected"),
    [
        (render.version, 3, "v3"),
        (render.rate, 58.0, "58.0"),  # requests/s printed 58.000 before
        (render.rate, 3.456, "3.5"),
        (render.rate, None, "-"),
        (render.version, None, "-"),
        (render.percent, 0.8, "80.0%"),
        (render.percent, None, "-"),
        (render.short_id, "0123456789abcdef", "01234567"),
        (render.short_id, None, "-"),
    ],
)
def test_small_forms(fn: Any, value: Any, expected: str) -> None:
    assert fn(value) == expected


ITEMS = [{"id": "a" * 32, "n": 5, "x": None}, {"id": "b" * 32, "n": 12, "x": "long value"}]
COLUMNS = [
    Column("id", lambda i: render.short_id(i["id"])),
    Column("n", lambda i: i["n"], right=True),
    Column("x", lambda i: i["x"], wide=True),
]


def test_table_columns_align_and_wide_adds_its_columns() -> None:
    narrow = render.columns_table(ITEMS, COLUMNS).splitlines()
    assert narrow == ["ID          N", "aaaaaaaa    5", "bbbbbbbb   12"]
    wide = render.columns_table(ITEMS, COLUMNS, wide=True).splitlines()
    assert wide[0].split() == ["ID", "N", "X"]
    assert wide[1].endswith("-") and wide[2].endswith("long value")


@pytest.mark.parametrize("fmt", [OutputFormat.JSON, OutputFormat.YAML])
def test_machine_formats_print_the_document_unchanged(
    fmt: OutputFormat, capsys: pytest.CaptureFixture[str]
) -> None:
    document = {"jobs": ITEMS, "next_before": 1_800_000_000.5}
    render.emit(document, fmt, lambda wide: "never the table")
    out = capsys.readouterr().out
    parsed = json.loads(out) if fmt is OutputFormat.JSON else yaml.safe_load(out)
    assert parsed == document


@pytest.mark.parametrize(("fmt", "wide"), [(OutputFormat.TABLE, False), (OutputFormat.WIDE, True)])
def test_table_formats_render_for_people(
    fmt: OutputFormat, wide: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    render.emit({"ignored": 1}, fmt, lambda w: f"wide={w}")
    assert capsys.readouterr().out == f"wide={wide}\n"


def test_an_empty_list_says_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    render.emit_list({"jobs": []}, [], COLUMNS, OutputFormat.TABLE, "No jobs. Submit one.")
    assert capsys.readouterr().out == "No jobs. Submit one.\n"
    render.emit_list({"jobs": []}, [], COLUMNS, OutputFormat.JSON, "No jobs. Submit one.")
    assert json.loads(capsys.readouterr().out) == {"jobs": []}


def test_fields_and_sections() -> None:
    head = render.fields([("status", "ACTIVE"), ("canary", None)])
    assert head.splitlines() == ["status:  ACTIVE", "canary:  -"]
    assert render.section("versions", "") == "versions:\n  none"
    assert render.section("versions", "a\nb") == "versions:\n  a\n  b"
