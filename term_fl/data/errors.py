"""The error raised for unusable data (a malformed file, a device too small to split)."""


class DataError(ValueError):
    """Data that cannot be used as given.

    The message names the file or device and the problem, and says how to fix
    it where that is not obvious. A subclass of ``ValueError``, so callers that
    validate settings can catch both in one place.
    """
