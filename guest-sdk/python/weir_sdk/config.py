"""The job's `[operators.config]`: string values by key, read with errors that name the
key and what it expects. The keys an operator reads are the keys it knows; any other
key in the job file is refused once the operator is constructed. With them come the
names of the operator's inputs and outputs, looked up by name into the indexes that
batches and emitted records carry."""

from typing import Dict, List, Optional, Sequence, Tuple

from .errors import ConfigError

# The most outputs an operator can have: the WIT gives each record's output as a u8.
MAX_OUTPUTS = 256
# What an operator of weir:operator@0.2, or one built natively, calls its one input
# and output (the host's names for a linear pipeline's operator).
DEFAULT_INPUTS = ("in",)
DEFAULT_OUTPUTS = ("out",)


class Config:
    """The operator's configuration, as the job file gives it (every value a string),
    and the names of its inputs and outputs, in the job file's order."""

    def __init__(self, pairs: Sequence[Tuple[str, str]], inputs: Sequence[str] = DEFAULT_INPUTS,
                 outputs: Sequence[str] = DEFAULT_OUTPUTS) -> None:
        self._values: Dict[str, str] = {}
        for name, value in pairs:
            if name in self._values:
                raise ConfigError(f"operator config `{name}` is given twice")
            self._values[name] = value
        self._known: List[str] = []
        self._inputs = tuple(inputs)
        self._outputs = tuple(outputs)
        if not self._inputs or not self._outputs:
            raise ConfigError("an operator needs at least one input and one output, but was "
                              f"given inputs {_names(self._inputs)} and outputs "
                              f"{_names(self._outputs)}")
        if len(self._outputs) > MAX_OUTPUTS:
            raise ConfigError(f"an operator has at most {MAX_OUTPUTS} outputs, but was given "
                              f"{len(self._outputs)}")

    @property
    def inputs(self) -> Tuple[str, ...]:
        """The names of the operator's inputs; a batch's `Records.input` indexes them."""
        return self._inputs

    @property
    def outputs(self) -> Tuple[str, ...]:
        """The names of the operator's outputs; `emit_to` takes a name or an index."""
        return self._outputs

    def input(self, name: str) -> int:
        """The index of the input named `name`; refused if the operator has none."""
        index = self.find_input(name)
        if index is None:
            raise ConfigError(f"operator needs an input named `{name}`; its inputs are "
                              f"{_names(self._inputs)}: name one `{name}` in the operator's "
                              "`inputs` in the job file")
        return index

    def find_input(self, name: str) -> Optional[int]:
        """The index of the input named `name`, or None (an optional input)."""
        return self._inputs.index(name) if name in self._inputs else None

    def output(self, name: str) -> int:
        """The index of the output named `name`; refused if the operator has none."""
        index = self.find_output(name)
        if index is None:
            raise ConfigError(f"operator needs an output named `{name}`; its outputs are "
                              f"{_names(self._outputs)}: name one `{name}` in the operator's "
                              "`outputs` in the job file")
        return index

    def find_output(self, name: str) -> Optional[int]:
        """The index of the output named `name`, or None (an optional output)."""
        return self._outputs.index(name) if name in self._outputs else None

    def deny_unknown_inputs(self, *known: str) -> None:
        """Refuses an input whose name is not among `known`: an operator that reads
        inputs by name says so, rather than ignore a batch it cannot place."""
        for name in self._inputs:
            if name not in known:
                raise ConfigError(f"operator was given an input named `{name}` it does not "
                                  f"read; its inputs must be among {_names(known)}")

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


def _names(names: Sequence[str]) -> str:
    """Names as the errors list them: `[a, b]`."""
    return "[" + ", ".join(names) + "]"
