"""The errors raised for unusable data (a malformed file, a device too small to split, a missing file)."""


class DataError(ValueError):
    """Data that cannot be used as given.

    The message names the file or device and the problem, and says how to fix
    it where that is not obvious. A subclass of ``ValueError``, so callers that
    validate settings can catch both in one place.
    """


class DataSettingError(DataError):
    """A dataset setting whose value cannot be used (a file that is not there); ``setting`` names it.

    A scenario reports it under the setting's key (``data.vehicle.path``).
    """

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting
        self.message = message
