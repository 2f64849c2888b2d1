"""``cbsim report``: the click command."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import click

from cbsim.common.errors import CbsimError, UserError
from cbsim.studies.report.document import FORMATS
from cbsim.studies.report.writing import write_report


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    try:
        yield
    except CbsimError as err:
        raise UserError(str(err)) from None


@click.command("report", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("source", metavar="RESULTS_DIR_OR_SWEEP", type=click.Path(path_type=Path))
@click.option(
    "--out",
    "-o",
    required=True,
    type=click.Path(path_type=Path),
    help="Report file: report.html (one self-contained page; print it to PDF from a browser) "
    "or report.md (its figures are written beside it). A .pdf name is refused.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="html (self-contained, figures embedded) or md. Default: from the --out suffix.",
)
@click.option("--title", default=None, help="Report title. Default: from the source.")
def report_command(source: Path, out: Path, fmt: str | None, title: str | None) -> None:
    """Write a report of RESULTS_DIR_OR_SWEEP: a run directory, a sweep directory, a capacity
    plan (the JSON of cbsim capacity --json, or a directory holding capacity.json / plan.json),
    or a deployment plan (the folder of cbsim plan --out, or its plan.json)."""
    with _user_errors():
        written = write_report(source, out, fmt=fmt, title=title)
    click.echo(str(written))
