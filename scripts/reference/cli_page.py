"""cli.md: every command and subcommand of `cli.main._build_parser()`, with its
usage line and its arguments' types, defaults and help, read from argparse itself (never
from its terminal-width-dependent help output)."""
from __future__ import annotations

import argparse
from pathlib import Path

from .markdown import GENERATED, anchor, code, paragraphs, table


def _commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()):
    """(words, parser, help) for the parser and every subcommand below it, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name in sorted(action.choices):
                sub = action.choices[name]
                yield (*words, name), sub, helps.get(name)
                yield from _commands(sub, (*words, name))


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    actions = [action for action in parser._actions
               if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
               and action.help != argparse.SUPPRESS]
    positionals = [action for action in actions if not action.option_strings]
    options = sorted((action for action in actions if action.option_strings),
                     key=lambda action: max(action.option_strings, key=len))
    return positionals + options


def _is_flag(action: argparse.Action) -> bool:
    return action.nargs == 0


def _metavar(action: argparse.Action) -> str:
    if action.metavar:
        return str(action.metavar)
    if action.choices:
        return "{" + ",".join(str(choice) for choice in action.choices) + "}"
    return action.dest.upper() if action.option_strings else action.dest.upper()


def _usage(words: tuple[str, ...], parser: argparse.ArgumentParser) -> str:
    parts = ["tunedeck", *words]
    for action in _arguments(parser):
        if not action.option_strings:
            part = _metavar(action)
            parts.append(f"[{part}]" if action.nargs == "?" else part)
            continue
        name = max(action.option_strings, key=len)
        part = name if _is_flag(action) else f"{name} {_metavar(action)}"
        parts.append(part if action.required else f"[{part}]")
    if any(isinstance(action, argparse._SubParsersAction) for action in parser._actions):
        parts.append("COMMAND")
    return " ".join(parts)


def _type_name(action: argparse.Action) -> str:
    if _is_flag(action):
        return "flag"
    if action.choices:
        return "one of " + ", ".join(str(choice) for choice in action.choices)
    kind = getattr(action.type, "__name__", None) if action.type else "str"
    return {"int": "integer", "float": "number", "str": "text", "Path": "path"}.get(kind, kind)


def _default(action: argparse.Action) -> str:
    if _is_flag(action):
        return "off" if not action.default else "on"
    if action.required or (not action.option_strings and action.nargs != "?"):
        return "required"
    if action.default is None or action.default == argparse.SUPPRESS:
        return "—"
    if isinstance(action.default, Path) and action.default.is_absolute():
        raise SystemExit(f"write_reference: {action.dest}'s default is a path of this machine")
    return code(action.default)


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    text = action.help or ""
    if "%" in text:
        text = parser._get_formatter()._expand_help(action)
    return text


def render() -> str:
    from cli.main import _build_parser

    root = _build_parser()
    commands = [(words, parser, help_text) for words, parser, help_text in _commands(root)]
    lines = [GENERATED, "", "# Command line reference", "",
             "Every `tunedeck` command, as its own parser declares it (`tunedeck COMMAND "
             "--help` prints the same). After `make run` the command is `.venv/bin/tunedeck` "
             "(or `source .venv/bin/activate`). The guides say when to use which: "
             "[user guide](../user-guide.md), [deploying](../deploy.md).", "",
             "## Commands", ""]
    lines += table(["command", "what it does"],
                   ([f"[{code('tunedeck ' + ' '.join(words))}](#{anchor('tunedeck ' + ' '.join(words))})",
                     help_text or ""] for words, _parser, help_text in commands))
    for words, parser, help_text in commands:
        title = "tunedeck " + " ".join(words)
        lines += ["", f"## {title}", ""]
        if help_text:
            lines += [help_text[0].upper() + help_text[1:] + ("" if help_text.endswith(".") else "."), ""]
        if parser.description and parser.description != help_text:
            lines += [paragraphs(parser.description), ""]
        lines += ["```text", _usage(words, parser), "```"]
        arguments = _arguments(parser)
        if arguments:
            lines += [""]
            lines += table(["argument", "type", "default", "help"],
                           ([code(max(a.option_strings, key=len) if a.option_strings else _metavar(a)),
                             _type_name(a), _default(a), _help(parser, a)] for a in arguments))
    return "\n".join(lines) + "\n"
