"""One way to turn a config dataclass into a command line (``--help`` included).

Every entry point (``python -m router.train_sft`` and friends) declares its options as a
dataclass whose fields carry a one-line docstring underneath, as in CleanRL's ``Args``;
:func:`parse` turns it into a parser with tyro, and :func:`run_main` turns a user's mistake
(any :class:`~data_pipeline.errors.Route2SQLError`) into one line on stderr and exit status 2.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

import tyro

from data_pipeline.errors import Route2SQLError

T = TypeVar("T")


def parse(config_cls: type[T], args: Sequence[str] | None = None, description: str | None = None) -> T:
    """Parse ``args`` (default ``sys.argv[1:]``) into ``config_cls``.

    Field names become ``--kebab-case`` flags; the docstring under each field is its help.
    Cross-field checks in ``__post_init__`` raise :class:`~data_pipeline.errors.ConfigError`.
    """
    return tyro.cli(config_cls, args=args, description=description, config=(tyro.conf.FlagConversionOff,))


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
