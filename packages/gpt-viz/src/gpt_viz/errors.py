class VizError(Exception):
    """Bad input to a picture, in one line that names the file, metric or shape at fault: the CLI shows it as-is."""
