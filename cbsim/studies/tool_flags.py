"""Command lines as argparse-based tools spell them, read by click commands.

``vllm bench serve`` and ``aiconfigurator cli default`` parse their flags with argparse, and their
users type what argparse takes; a click command refuses some of it. :class:`ToolCommand` rewrites
such a command line into click's spelling before click parses it:

* ``--total_gpus 8`` is ``--total-gpus 8`` (vLLM's ``FlexibleArgumentParser`` takes underscores
  for dashes, and AI Configurator's flags were ``--total_gpus`` and ``--model_path`` before they
  were ``--total-gpus``), when the dashed flag is the command's;
* an option of :attr:`ToolCommand.variadic` takes every value that follows it, as argparse's
  ``nargs="+"`` does: ``--goodput ttft:300 tpot:50`` is ``--goodput ttft:300 --goodput tpot:50``
  (a value starting with ``-`` and a letter is the next flag; ``-1`` is a value), and one given
  no value is left out, as argparse's ``nargs="*"`` gives an empty list.

Everything after ``--`` is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import click

__all__ = ["ToolCommand", "tool_spelling"]

_FLAG = re.compile(r"^--[A-Za-z0-9]")
_NEXT_FLAG = re.compile(r"^-[A-Za-z-]")


def _long_names(command: click.Command) -> set[str]:
    """Every long flag of the command (``--no-x`` forms of boolean flags too)."""
    names: set[str] = set()
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(n for n in (*param.opts, *param.secondary_opts) if n.startswith("--"))
    return names


def _dashed(flag: str, known: set[str]) -> str:
    """``--total_gpus`` as ``--total-gpus`` when the command has that flag."""
    if "_" not in flag or flag in known:
        return flag
    dashed = "--" + flag[2:].replace("_", "-")
    return dashed if dashed in known else flag


def tool_spelling(args: Sequence[str], known: set[str], variadic: set[str]) -> list[str]:
    """``args`` rewritten in click's spelling (see the module docstring)."""
    out: list[str] = []
    items = list(args)
    i = 0
    while i < len(items):
        arg = items[i]
        if arg == "--":
            out.extend(items[i:])
            break
        if not _FLAG.match(arg):
            out.append(arg)
            i += 1
            continue
        flag, eq, value = arg.partition("=")
        flag = _dashed(flag, known)
        if flag not in variadic:
            out.append(f"{flag}{eq}{value}" if eq else flag)
            i += 1
            continue
        values = [value] if eq else []
        i += 1
        while i < len(items) and not _NEXT_FLAG.match(items[i]) and items[i] != "--":
            values.append(items[i])
            i += 1
        for each in values:  # none: nothing (argparse's nargs="*" gives an empty list)
            out += [flag, each]
    return out


class ToolCommand(click.Command):
    """A click command that reads argparse spellings (see the module docstring); ``variadic``:
    its options that take several values after one flag."""

    variadic: frozenset[str] = frozenset()

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        known = _long_names(self)
        rewritten = tool_spelling(args, known, set(self.variadic) & known)
        return super().parse_args(ctx, rewritten)


def tool_command(variadic: Sequence[str] = ()) -> type[ToolCommand]:
    """A :class:`ToolCommand` class whose options ``variadic`` take several values each."""

    class Command(ToolCommand):
        pass

    Command.variadic = frozenset(variadic)
    return Command


def given(ctx: click.Context, name: str) -> bool:
    """Whether the option ``name`` was on the command line (not its default)."""
    source: Any = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"
