"""Every ``agentconsole ...`` command line README.md shows (its command table and its
examples) parses against the CLI as written: a user who copies one gets the command, not a
usage error."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from agentconsole.cli import main

README = Path(__file__).resolve().parents[2] / "README.md"
#: a table row's command: its first cell, in backticks
TABLE_COMMAND = re.compile(r"^\| `(agentconsole [^`]*)` \|", re.MULTILINE)
#: a fenced code block
FENCED = re.compile(r"^```\n(.*?)^```$", re.MULTILINE | re.DOTALL)
#: an example line of a fenced block
EXAMPLE_COMMAND = re.compile(r"^(?:\.venv/bin/)?(agentconsole .*)$", re.MULTILINE)


def readme_commands() -> list[str]:
    text = README.read_text()
    examples = [line for block in FENCED.findall(text) for line in EXAMPLE_COMMAND.findall(block)]
    return TABLE_COMMAND.findall(text) + examples


def concrete(words: list[str], tmp_path: Path) -> list[str]:
    """``words`` with the README's placeholders (``TRACE``, ``DIR``, ...) made real values."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("")
    values = {
        "TRACE": str(trace),
        "URL": "http://127.0.0.1:8000",
        "KEY": "sk-dev",
        "DIR": str(tmp_path / "out"),
        "DB": str(tmp_path / "agentconsole.duckdb"),
        "FILE": str(tmp_path / "window.jsonl"),
    }
    unknown = [w for w in words if w.isupper() and w not in values]
    assert not unknown, f"give the placeholder(s) {unknown} a value in this test"
    return [values.get(word, word) for word in words]


def parse(args: list[str]) -> click.Context:
    """Parse ``args`` down to the leaf command as click would run it, without running it (the
    README passes no option to a group itself: a group's first word names its subcommand)."""
    command: click.Command = main
    context = click.Context(main, info_name="agentconsole")
    while isinstance(command, click.Group):
        name, *args = args
        found = command.get_command(context, name)
        if found is None:
            raise click.UsageError(f"no such command {name!r}", context)
        context = found.make_context(name, args, parent=context)
        command = found
    return context


def test_the_readme_shows_the_commands_it_documents() -> None:
    commands = readme_commands()
    assert "agentconsole serve" in commands
    assert any(c.startswith("agentconsole replay") for c in commands)
    assert len(commands) >= 10


@pytest.mark.parametrize("line", readme_commands())
def test_a_readme_command_line_parses(line: str, tmp_path: Path) -> None:
    words = concrete(shlex.split(line), tmp_path)
    assert words[0] == "agentconsole"
    try:
        context = parse(words[1:])
    except click.UsageError as error:
        pytest.fail(f"README's `{line}`: {error.format_message()}")
    assert context.info_name in words  # the leaf command the line names
