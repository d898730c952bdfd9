"""One way to turn a config dataclass into a command line (``--help`` included).

Every entry point (``python -m router.train_sft`` and friends) declares its options as a
dataclass whose fields carry a one-line docstring underneath, as in CleanRL's ``Args``;
:func:`parse` turns it into a parser with tyro, and :func:`run_main` turns a user's mistake
(any :class:`~core.errors.Route2SQLError`) into one line on stderr and exit status 2.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import tyro

from core.errors import Route2SQLError

T = TypeVar("T")


def parse(config_cls: type[T], args: Sequence[str] | None = None, description: str | None = None) -> T:
    """Parse ``args`` (default ``sys.argv[1:]``) into ``config_cls``.

    Field names become ``--kebab-case`` flags; the docstring under each field is its help.
    A boolean field takes ``--flag True`` / ``--flag False``; ``--no-flag`` is short for
    ``--flag False`` and a bare ``--flag`` for ``--flag True`` (nested fields too: ``--no-reward.x``).
    Cross-field checks in ``__post_init__`` raise :class:`~core.errors.ConfigError`.

    Raises:
        SystemExit: status 2 after printing ``error: <field>: <message>`` as one line when
            ``config_cls.__post_init__`` raises a Route2SQLError (tyro would print a boxed usage
            message instead), or tyro's own message for a malformed command line.
    """
    opts = (tyro.conf.FlagConversionOff,)
    args = _expand_no_flags(config_cls, sys.argv[1:] if args is None else args)
    description = plain_text(description) if description else description
    prog = program_name()
    if not (dataclasses.is_dataclass(config_cls) and hasattr(config_cls, "__post_init__")):
        return _tyro(config_cls, args, description, opts, prog)
    parsed = _tyro(_lenient(config_cls), args, description, opts, prog)
    values = {f.name: getattr(parsed, f.name) for f in dataclasses.fields(config_cls) if f.init}
    try:
        return config_cls(**values)  # the real checks run here, outside tyro
    except Route2SQLError as exc:  # a bad flag value: one line and exit 2, as tyro does for bad syntax
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _tyro(cls: Any, args: list[str], description: str | None, opts: tuple, prog: str | None) -> Any:
    """``tyro.cli``, with a malformed command line reported in one or two plain lines (tyro prints
    an 18-line box ending in a suggestion to run the help) and exit status 2."""
    import contextlib
    import io

    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf):
            return tyro.cli(cls, args=args, description=description, config=opts, prog=prog)
    except SystemExit as exc:
        if exc.code in (0, None):
            raise
        print(command_line_error(buf.getvalue(), prog or "this command"), file=sys.stderr)
        raise SystemExit(2) from None


def command_line_error(box: str, prog: str) -> str:
    r"""tyro's boxed parse error as two lines: what is wrong, then where the help is.

    >>> box = "│ Unrecognized options: │\n│     --bogus │\n│ Missing from x: │\n│     --data PATH │\n│  Data set. (required) │"
    >>> print(command_line_error(box, "python -m x"))
    error: unrecognized option --bogus; missing --data
    see python -m x --help
    >>> box = "│ Unrecognized options: --topk, 3 │\n│ Perhaps you meant: │\n│     --top-k INT │\n│  (default: 3) │"
    >>> print(command_line_error(box, "p"))
    error: unrecognized option --topk (did you mean --top-k?)
    see p --help
    >>> print(command_line_error("│ Error parsing --epochs: invalid literal for int() with base 10: 'abc' │", "p"))
    error: --epochs: invalid literal for int() with base 10: 'abc'
    see p --help
    >>> wrapped = "│ Error parsing rerank: --rerank.temperature: must be a finite number > 0, got │\n│ nan │\n│ ───── │\n│ For full helptext, see p --help │"
    >>> print(command_line_error(wrapped, "p"))
    error: --rerank.temperature: must be a finite number > 0, got nan
    see p --help
    """
    import re

    lines = [re.sub(r"^[\s│╭╰─┃┏┗━╮╯]+|[\s│╮╯─┃┓┛━]+$", "", ln) for ln in box.splitlines()]
    lines = [ln for ln in lines if ln and not set(ln) <= set("─━ ")]
    at = next((i for i, ln in enumerate(lines) if ln.startswith("Error parsing ")), None)
    if at is not None:  # the message may wrap onto the box's next lines, up to its help pointer
        rest = lines[at + 1 :]
        end = next((i for i, ln in enumerate(rest) if ln.lower().startswith(("for full helptext", "argument helptext"))), len(rest))
        message = " ".join([lines[at].removeprefix("Error parsing "), *rest[:end]])
        message = re.sub(r"^[\w.]+: (?=--)", "", message)  # "rerank: --rerank.top-k: ..." names the group twice
        return f"error: {message}\nsee {prog} --help"
    section, missing, wrong, similar, other = "", [], [], [], []
    for ln in lines:
        low = ln.lower()
        if low.startswith("unrecognized option"):
            section = "unknown"
            _, _, typed = ln.partition(":")
            wrong += [w.strip() for w in typed.split(",") if w.strip().startswith("-")]
        elif low.startswith("perhaps you meant"):
            section = "similar"
        elif low.startswith("missing"):
            section = "missing"
        elif low.startswith(("for full helptext", "argument helptext")) or "--help" in low:
            section = "help"
        elif re.match(r"--?\w", ln):
            if section == "missing":
                missing.append(ln.split()[0])
            elif section == "unknown":
                wrong.append(ln.split()[0])
            elif section == "similar":
                similar.append(ln.split()[0])
        elif section == "" and not low.startswith(("usage", "parsing error", "value error")):
            other.append(ln)
    parts = []
    if wrong:
        wrong = list(dict.fromkeys(wrong))
        parts.append(("unrecognized option " if len(wrong) == 1 else "unrecognized options ") + ", ".join(wrong))
        if similar:
            parts[-1] += " (did you mean " + " or ".join(dict.fromkeys(similar)) + "?)"
    if missing:
        parts.append("missing " + ", ".join(dict.fromkeys(missing)))
    if not parts:
        parts.append(" ".join(other[:2]) or "bad command line")
    return f"error: {'; '.join(parts)}\nsee {prog} --help"


def program_name() -> str | None:
    """``python -m package.module`` for a module run with ``-m`` (what a user typed), else None
    (argparse's default, the script's name)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    return f"python -m {name.removesuffix('.__main__')}" if name else None


def check_text_arguments(questions: Sequence[str], where: str = "questions") -> None:
    """Refuse a command-line question that is not UTF-8 text: undecodable argv bytes reach Python
    as lone surrogates, which no tokenizer takes.

    Raises:
        ConfigError: naming ``where`` and the question's position (from 1) and character.
    """
    from core.errors import ConfigError

    for i, q in enumerate(questions, 1):
        try:
            q.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ConfigError(f"question {i} is not UTF-8 text (character {exc.start + 1})", where=where) from exc


def plain_text(text: str) -> str:
    r"""Help text without reST markup: ``code`` and :func:`name` become code and name, a literal block's ``::`` one colon.

    >>> plain_text("Run ``python -m x`` (see :func:`router.route.main`).")
    'Run python -m x (see router.route.main).'
    >>> plain_text("For example::\n\n    python -m x")
    'For example:\n\n    python -m x'
    """
    import re

    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    text = re.sub(r"(?<=\S)::(?=\s*\n)", ":", text)
    return text.replace("``", "")


def _bool_flags(config_cls: Any, prefix: str = "") -> set[str]:
    """Flag names (``progress``, ``reward.use-x``) of the boolean fields of a config dataclass,
    optional booleans (``bool | None``) and nested ones too; a nested config marked
    ``tyro.conf.OmitArgPrefixes`` contributes its flags without the prefix, as tyro names them."""
    if not dataclasses.is_dataclass(config_cls):
        return set()
    try:
        hints = typing.get_type_hints(config_cls, include_extras=True)
    except Exception:  # an annotation that cannot be resolved: no shorthand for that class
        return set()
    names: set[str] = set()
    for f in dataclasses.fields(config_cls):
        hint = hints.get(f.name)
        omit_prefix = False
        if typing.get_origin(hint) is typing.Annotated:
            omit_prefix = any(m is tyro.conf.OmitArgPrefixes for m in hint.__metadata__)
            hint = typing.get_args(hint)[0]
        name = prefix + f.name.replace("_", "-")
        if hint is bool or hint == (bool | None):
            names.add(name)
        elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
            names |= _bool_flags(hint, prefix if omit_prefix else name + ".")
    return names


def _expand_no_flags(config_cls: Any, args: Sequence[str]) -> list[str]:
    """``--no-progress`` -> ``--progress False`` and a bare ``--progress`` -> ``--progress True`` for every boolean field."""
    flags = _bool_flags(config_cls)
    args = list(args)
    out: list[str] = []
    for i, a in enumerate(args):
        name = a[len("--no-"):] if a.startswith("--no-") else None
        if name is not None and (name in flags or name.replace("_", "-") in flags):
            out += ["--" + name.replace("_", "-"), "False"]
        elif a.startswith("--") and a[2:].replace("_", "-") in flags and (i + 1 == len(args) or args[i + 1] not in ("True", "False")):
            out += [a, "True"]  # a bare switch: --skip-smoke-test
        else:
            out.append(a)
    return out


def _lenient(config_cls: type[T]) -> type[T]:
    """A subclass of ``config_cls`` whose ``__post_init__`` lets a Route2SQLError pass (checked later)."""
    post: Callable[[Any], None] = config_cls.__post_init__  # type: ignore[attr-defined]

    def __post_init__(self: Any) -> None:
        try:
            post(self)
        except Route2SQLError:
            pass

    names = {k: getattr(config_cls, k) for k in ("__doc__", "__module__", "__qualname__")}
    return type(config_cls.__name__, (config_cls,), {"__post_init__": __post_init__, **names})


def run_main(main: Callable[[], object]) -> None:
    """Run ``main``; a :class:`Route2SQLError` becomes ``error: <message>`` and exit code 2."""
    try:
        main()
    except Route2SQLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
