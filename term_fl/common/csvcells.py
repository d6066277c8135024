"""CSV cells that a spreadsheet reads as data, never as a formula (CSV injection, OWASP).

A spreadsheet that opens a CSV file runs a text cell that starts with ``=``,
``+``, ``-`` or ``@`` as a formula (and some skip a leading tab or carriage
return first): a run named ``=HYPERLINK("http://evil.example", "x")`` would
become a link in every downloaded runs table. :func:`csv_cell` prefixes such
text with ``'``, which spreadsheets show as text; numbers are not text and
stay numbers (a negative number is not escaped). Every CSV term-fl writes
passes its cells through it: the dashboard's and the report's tables
(``term_fl.dashboard.queries.to_csv``, the same rule in the report's
``compare.js``), ``term-fl runs --format csv`` and a sweep's comparison.csv.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["FORMULA_STARTS", "csv_cell", "csv_row"]

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What a text cell must not start with."""


def csv_cell(value: Any) -> Any:
    """``value`` for a CSV cell: text starting with one of :data:`FORMULA_STARTS` gets a leading ``'``; anything
    else (numbers included) is returned as it is."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_row(values: Iterable[Any]) -> list[Any]:
    """:func:`csv_cell` of every value of a row."""
    return [csv_cell(value) for value in values]
