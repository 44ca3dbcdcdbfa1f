"""The command rules of docs/jobs.md ("The command rules", 运行指令说明), as a small lexer.

A job's command is run *without* a shell: it must start with an executable, and it is one
command, not a script. So ``KEY=VALUE python3 train.py`` and ``python3 train.py && python3
evaluate.py`` are rejected with a message that shows the ``bash -c "…"`` form that does what the
user meant. What the lexer does accept is the part of shell syntax people type in a single
command line:

- words separated by blanks; ``'single'`` and ``"double"`` quotes; backslash escapes; a
  backslash before a newline joins lines (the reference's examples are written that way);
- ``$NAME`` and ``${NAME}`` outside single quotes, expanded from the worker's environment when
  the worker starts (so ``torchrun --nnodes ${WORLD_SIZE} …`` works as the reference shows);
  an unquoted expansion is split on blanks, a quoted one is not, as in a shell.

Everything else that needs a shell (``;``, ``&&``, ``||``, ``|``, ``&``, redirections, ``$(…)``,
backquotes, subshells, other ``${…}`` forms) is an error that suggests ``bash -c``. Glob
characters and ``~`` are passed through literally.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["CommandError", "Literal", "ParsedCommand", "Var", "bash_c_form", "parse_command"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_BLANKS = " \t"
_PLAIN_RUN = re.compile(r"[^ \t\\'\"$\n\r&|;<>()`]+")
"""Characters that mean nothing special outside quotes, as many as follow each other."""
_QUOTED_RUN = re.compile(r'[^"\\$`]+')
"""The same inside double quotes."""


class CommandError(ValueError):
    """A command the rules reject; the message says what to change."""


@dataclass(frozen=True, slots=True)
class Literal:
    text: str
    quoted: bool


@dataclass(frozen=True, slots=True)
class Var:
    name: str
    quoted: bool


Part = Literal | Var
Word = tuple[Part, ...]


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    """A command split into words; variables stay unexpanded until :meth:`render`."""

    words: tuple[Word, ...]

    @property
    def executable(self) -> str:
        """The first word as typed (variables shown as ``${NAME}``)."""
        return _display(self.words[0])

    def display_words(self) -> list[str]:
        """Every word as typed, without expansion; used by the launch rewriting rules."""
        return [_display(w) for w in self.words]

    def prepend(self, *literal_words: str) -> ParsedCommand:
        """A new command with literal words before this one's (e.g. a launcher prefix)."""
        extra = tuple((Literal(w, True),) for w in literal_words)
        return ParsedCommand(extra + self.words)

    def render(self, env: Mapping[str, str]) -> list[str]:
        """The argv to execute, with variables expanded from ``env`` as a shell would."""
        argv: list[str] = []
        for word in self.words:
            argv.extend(_expand(word, env))
        return argv


def _display(word: Word) -> str:
    return "".join(p.text if isinstance(p, Literal) else "${" + p.name + "}" for p in word)


def _expand(word: Word, env: Mapping[str, str]) -> list[str]:
    fields: list[str] = []
    current: list[str] = []
    has_content = False  # a quoted empty string still makes a field, as in a shell
    for part in word:
        if isinstance(part, Literal):
            current.append(part.text)
            has_content = has_content or part.quoted or bool(part.text)
            continue
        value = env.get(part.name, "")
        if part.quoted:
            current.append(value)
            has_content = True
            continue
        pieces = value.split()
        if not pieces:
            continue
        if value[0].isspace() and has_content:
            fields.append("".join(current))
            current, has_content = [], False
        for i, piece in enumerate(pieces):
            if i > 0:
                fields.append("".join(current))
                current = []
            current.append(piece)
            has_content = True
        if value[-1].isspace():
            fields.append("".join(current))
            current, has_content = [], False
    if has_content:
        fields.append("".join(current))
    return fields


def bash_c_form(command: str) -> str:
    """``bash -c "<command>"``, quoted so that bash receives the command unchanged."""
    escaped = command.strip().replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")
    return f'bash -c "{escaped}"'


def _reject(command: str, what: str) -> CommandError:
    return CommandError(
        f"{what}. A job's command is a single executable with its arguments, run without a "
        f"shell; to use shell syntax, wrap it: {bash_c_form(command)}"
    )


class _Lexer:
    """Linear in the command's length: runs of ordinary characters are taken with one regex
    match, and a word's literal text is collected in a list and joined once (joining piece by
    piece made a 1 MB word quadratic)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.words: list[Word] = []
        self.parts: list[Part] = []
        self.in_word = False
        self._pending: list[str] = []
        self._pending_quoted = False

    def fail(self, what: str) -> CommandError:
        return _reject(self.text, what)

    def end_word(self) -> None:
        self._flush()
        if self.in_word:
            self.words.append(tuple(self.parts))
        self.parts, self.in_word = [], False

    def _flush(self) -> None:
        if self._pending:
            self.parts.append(Literal("".join(self._pending), self._pending_quoted))
            self._pending = []

    def add(self, part: Part) -> None:
        self.in_word = True
        if isinstance(part, Literal):
            if self._pending and self._pending_quoted != part.quoted:
                self._flush()
            self._pending.append(part.text)
            self._pending_quoted = part.quoted
        else:
            self._flush()
            self.parts.append(part)

    def run(self) -> ParsedCommand:
        text = self.text
        while self.pos < len(text):
            ch = text[self.pos]
            if ch in _BLANKS:
                self.end_word()
                self.pos += 1
            elif ch == "\\":
                self.backslash()
            elif ch == "'":
                self.single_quoted()
            elif ch == '"':
                self.double_quoted()
            elif ch == "$":
                self.dollar(quoted=False)
            elif run := _PLAIN_RUN.match(text, self.pos):
                self.add(Literal(run.group(), False))
                self.pos = run.end()
            else:
                self.plain(ch)
        self.end_word()
        if not self.words:
            raise CommandError("the command is empty; give the executable to run and its arguments")
        return ParsedCommand(tuple(self.words))

    def plain(self, ch: str) -> None:
        text = self.text
        if ch in "\n\r":
            if not text[self.pos + 1 :].isspace() and text[self.pos + 1 :]:
                raise self.fail("the command has several lines, i.e. several commands")
            self.end_word()
            self.pos = len(text)
            return
        two = text[self.pos : self.pos + 2]
        if two in ("&&", "||"):
            raise self.fail(f"the command contains {two!r}, i.e. several commands")
        if ch == ";":
            raise self.fail("the command contains ';', i.e. several commands")
        if ch == "|":
            raise self.fail("the command contains a pipe '|'")
        if ch == "&":
            raise self.fail("the command contains '&' (run in background)")
        if ch in "<>":
            raise self.fail(f"the command contains a redirection {ch!r}")
        if ch in "()":
            raise self.fail(f"the command contains {ch!r} (a subshell or function)")
        if ch == "`":
            raise self.fail("the command contains a command substitution in backquotes")
        self.add(Literal(ch, False))
        self.pos += 1

    def backslash(self) -> None:
        nxt = self.text[self.pos + 1 : self.pos + 2]
        if nxt == "\n":
            self.pos += 2  # line continuation, as in the reference's multi-line examples
            return
        if not nxt:
            raise self.fail("the command ends with a lone backslash")
        self.add(Literal(nxt, True))
        self.pos += 2

    def single_quoted(self) -> None:
        end = self.text.find("'", self.pos + 1)
        if end < 0:
            raise CommandError("the command has a ' quote that is never closed; close it")
        self.add(Literal(self.text[self.pos + 1 : end], True))
        self.pos = end + 1

    def double_quoted(self) -> None:
        text = self.text
        self.pos += 1
        self.add(Literal("", True))
        while True:
            if self.pos >= len(text):
                raise CommandError('the command has a " quote that is never closed; close it')
            ch = text[self.pos]
            if ch == '"':
                self.pos += 1
                return
            if ch == "\\" and text[self.pos + 1 : self.pos + 2] in ('"', "\\", "$", "`", "\n"):
                nxt = text[self.pos + 1]
                if nxt != "\n":
                    self.add(Literal(nxt, True))
                self.pos += 2
            elif ch == "$":
                self.dollar(quoted=True)
            elif ch == "`":
                raise self.fail("the command contains a command substitution in backquotes")
            else:
                run = _QUOTED_RUN.match(text, self.pos)
                end = run.end() if run else self.pos + 1
                self.add(Literal(text[self.pos : end], True))
                self.pos = end

    def dollar(self, *, quoted: bool) -> None:
        text = self.text
        start = self.pos + 1  # no slicing of the rest: a command of many $ stays linear
        if text.startswith("(", start):
            raise self.fail("the command contains a command substitution '$(…)'")
        if text.startswith("{", start):
            close = text.find("}", start)
            inner = text[start + 1 : close] if close > 0 else ""
            if close < 0 or not _NAME.fullmatch(inner):
                shown = text[start - 1 : close + 1] if close >= 0 else text[start - 1 : start + 40]
                raise self.fail(f"only ${{NAME}} and $NAME expansions are supported, not {shown!r}")
            self.add(Var(inner, quoted))
            self.pos = close + 1
            return
        match = _NAME.match(text, start)
        if match is None:
            self.add(Literal("$", quoted))
            self.pos += 1
            return
        self.add(Var(match.group(0), quoted))
        self.pos = match.end()


def parse_command(text: str) -> ParsedCommand:
    """Split ``text`` per the command rules, or raise :class:`CommandError` that says why."""
    stripped = text.strip()
    parsed = _Lexer(stripped).run()
    first = parsed.words[0]
    head = first[0]
    if isinstance(head, Literal) and not head.quoted and _ASSIGNMENT.match(head.text):
        name = head.text.split("=", 1)[0]
        raise CommandError(
            f"the command must start with an executable, but {name}=… sets an environment "
            "variable (a shell feature). Put the variable in the job's env "
            f"(--env {name}=…), or wrap the command: {bash_c_form(stripped)}"
        )
    return parsed
