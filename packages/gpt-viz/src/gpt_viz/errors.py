"""The single exception type of gpt-viz."""


class VizError(Exception):
    """Bad input to a picture: its message is one line, fit to show a user as-is.

    The CLI turns it into ``gpt-viz: error: <message>`` with exit status 2, so
    every message names the file, metric or shape at fault.
    """
