"""The base of gpt-train's errors, each a one-line message that the CLI alone turns into an exit status."""


class TrainError(Exception):
    """Bad input or an unusable environment that the user must fix; the message says what and where."""


def message_of(error: Exception) -> str:
    """The text an error was raised with (a KeyError's str is its repr, quotes and all)."""
    if len(error.args) == 1 and isinstance(error.args[0], str):
        return error.args[0]
    return str(error)
