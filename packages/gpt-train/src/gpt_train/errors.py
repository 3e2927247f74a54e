"""The base of gpt-train's domain errors: each layer raises its own subclass with a message fit to show a user as
one line; only the CLI turns them into `gpt-train: error: <message>` and an exit status."""


class TrainError(Exception):
    """Bad input or an unusable environment that the user must fix; the message says what and where."""


def message_of(error: Exception) -> str:
    """The text an error was raised with, as one line for a user: its message itself (a KeyError's str is the
    message's repr, quotes and all), else str(error)."""
    if len(error.args) == 1 and isinstance(error.args[0], str):
        return error.args[0]
    return str(error)
