"""What every benchmark prints about the machine it ran on (imported by the scripts beside it)."""

from __future__ import annotations

import os
import platform
import sys


def cpu_model() -> str:
    """The CPU model from ``/proc/cpuinfo`` (Linux), else :func:`platform.processor`."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """The machine in words: CPU model, cores, torch version and threads (when torch is imported), Python.

    >>> "cores" in machine() and "Python" in machine()
    True
    """
    torch = sys.modules.get("torch")
    threads = f", torch {torch.__version__} with {torch.get_num_threads()} threads" if torch is not None else ""
    return f"{cpu_model()}, {os.cpu_count()} cores{threads}, Python {platform.python_version()}, {platform.system()}"
