"""The refusals an operator raises: the SDK hands their message to the host, which
reports it with the operator's name and plugin file."""


class Error(Exception):
    """A refusal with a message for the user: bad input, a state that cannot be used."""


class ConfigError(Error):
    """The job's `[operators.config]` is missing a key, has an unknown one, or a bad value;
    or the operator's inputs or outputs are not the ones it needs."""


class StateError(Error):
    """A checkpoint's state cannot be restored, or the state cannot be checkpointed."""
