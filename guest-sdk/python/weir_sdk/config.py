"""The job's `[operators.config]`: string values by key, read with errors that name the
key and what it expects. The keys an operator reads are the keys it knows; any other
key in the job file is refused once the operator is constructed."""

from typing import Dict, List, Optional, Sequence, Tuple

from .errors import ConfigError


class Config:
    """The operator's configuration, as the job file gives it (every value a string)."""

    def __init__(self, pairs: Sequence[Tuple[str, str]]) -> None:
        self._values: Dict[str, str] = {}
        for name, value in pairs:
            if name in self._values:
                raise ConfigError(f"operator config `{name}` is given twice")
            self._values[name] = value
        self._known: List[str] = []

    def _know(self, name: str) -> Optional[str]:
        if name not in self._known:
            self._known.append(name)
        return self._values.get(name)

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:
        """The value of `name`, or `default` if the job file does not set it."""
        value = self._know(name)
        return default if value is None else value

    def require(self, name: str, expected: str = "a value") -> str:
        """The value of `name`; refused if missing or empty. `expected` says what it
        should be, for the message (e.g. "a top-level JSON field name")."""
        value = self._know(name)
        if value is None:
            raise ConfigError(f"operator config `{name}` is missing: expected {expected}")
        if value == "":
            raise ConfigError(f"operator config `{name}` is empty: expected {expected}")
        return value

    def integer(self, name: str, default: Optional[int] = None, *,
                minimum: Optional[int] = None, maximum: Optional[int] = None,
                expected: str = "an integer") -> int:
        """The integer value of `name` within [`minimum`, `maximum`]; `default` if it is
        not set (required when `default` is None)."""
        text = self._know(name)
        if text is None:
            if default is None:
                raise ConfigError(f"operator config `{name}` is missing: expected {expected}")
            return default
        try:
            value = int(text.strip())
        except ValueError:
            raise ConfigError(f"operator config `{name}` = {text!r} is not an integer: "
                              f"expected {expected}") from None
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            bounds = f"at least {minimum}" if maximum is None else (
                f"at most {maximum}" if minimum is None else f"from {minimum} to {maximum}")
            raise ConfigError(f"operator config `{name}` = {value} is out of range: "
                              f"expected {expected}, {bounds}")
        return value

    def names(self) -> List[str]:
        """Every key the job file sets."""
        return list(self._values)

    def check_unknown(self) -> None:
        """Refuses the keys the operator never read (the SDK calls this after the
        operator's `__init__`)."""
        unknown = [name for name in self._values if name not in self._known]
        if not unknown:
            return
        known = ", ".join(self._known) if self._known else "no keys"
        raise ConfigError(
            f"operator config has unknown key{'s' if len(unknown) > 1 else ''} "
            + ", ".join(f"`{name}`" for name in unknown)
            + f"; this operator knows: {known}")
