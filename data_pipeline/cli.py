"""One way to turn a config dataclass into a command line (``--help`` included).

Every entry point (``python -m router.train_sft`` and friends) declares its options as a
dataclass whose fields carry a one-line docstring underneath, as in CleanRL's ``Args``;
:func:`parse` turns it into a parser with tyro, and :func:`run_main` turns a user's mistake
(any :class:`~data_pipeline.errors.Route2SQLError`) into one line on stderr and exit status 2.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import tyro

from data_pipeline.errors import Route2SQLError

T = TypeVar("T")


def parse(config_cls: type[T], args: Sequence[str] | None = None, description: str | None = None) -> T:
    """Parse ``args`` (default ``sys.argv[1:]``) into ``config_cls``.

    Field names become ``--kebab-case`` flags; the docstring under each field is its help.
    A boolean field takes ``--flag True`` / ``--flag False``; ``--no-flag`` is short for
    ``--flag False`` and a bare ``--flag`` for ``--flag True`` (nested fields too: ``--no-reward.x``).
    Cross-field checks in ``__post_init__`` raise :class:`~data_pipeline.errors.ConfigError`.

    Raises:
        SystemExit: status 2 after printing ``error: <field>: <message>`` as one line when
            ``config_cls.__post_init__`` raises a Route2SQLError (tyro would print a boxed usage
            message instead), or tyro's own message for a malformed command line.
    """
    opts = (tyro.conf.FlagConversionOff,)
    args = _expand_no_flags(config_cls, sys.argv[1:] if args is None else args)
    if not (dataclasses.is_dataclass(config_cls) and hasattr(config_cls, "__post_init__")):
        return tyro.cli(config_cls, args=args, description=description, config=opts)
    parsed = tyro.cli(_lenient(config_cls), args=args, description=description, config=opts)
    values = {f.name: getattr(parsed, f.name) for f in dataclasses.fields(config_cls) if f.init}
    try:
        return config_cls(**values)  # the real checks run here, outside tyro
    except Route2SQLError as exc:  # a bad flag value: one line and exit 2, as tyro does for bad syntax
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _bool_flags(config_cls: Any, prefix: str = "") -> set[str]:
    """Flag names (``progress``, ``reward.use-x``) of the boolean fields of a config dataclass, nested ones too."""
    if not dataclasses.is_dataclass(config_cls):
        return set()
    try:
        hints = typing.get_type_hints(config_cls)
    except Exception:  # an annotation that cannot be resolved: no shorthand for that class
        return set()
    names: set[str] = set()
    for f in dataclasses.fields(config_cls):
        hint = hints.get(f.name)
        name = prefix + f.name.replace("_", "-")
        if hint is bool:
            names.add(name)
        elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
            names |= _bool_flags(hint, name + ".")
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
