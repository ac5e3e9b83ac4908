"""Logging through the host: each line is tagged with the plugin and subtask and is
rate-limited per instance. Outside a component (native tests) lines go to stderr."""

import sys
from typing import Any, Optional

_host: Optional[Any] = None


def _write(level: str, message: str) -> None:
    global _host
    if _host is None:
        try:
            from wit_world.imports import log as host_log
        except ImportError:
            print(f"{level}: {message}", file=sys.stderr)
            return
        _host = host_log
    _host.log(getattr(_host.Level, level.upper()), message)


def trace(message: str) -> None:
    """Logs `message` at TRACE."""
    _write("trace", message)


def debug(message: str) -> None:
    """Logs `message` at DEBUG."""
    _write("debug", message)


def info(message: str) -> None:
    """Logs `message` at INFO."""
    _write("info", message)


def warn(message: str) -> None:
    """Logs `message` at WARN."""
    _write("warn", message)


def error(message: str) -> None:
    """Logs `message` at ERROR."""
    _write("error", message)
