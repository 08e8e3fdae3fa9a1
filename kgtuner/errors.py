"""Exceptions raised for bad user input. Each message names the file/key/value at fault and a fix."""


class KGTunerError(Exception):
    """Base class of every user-facing kgtuner error (caught by the CLIs: message, exit code 2)."""


class DataError(KGTunerError, ValueError):
    """A dataset cannot be read: missing/empty split, malformed line, bad columns, unknown name."""


class ConfigError(KGTunerError, ValueError):
    """A configuration or search-space file is invalid (unknown key, bad range, bad combination)."""
