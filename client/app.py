"""ClientApp for `flwr run .`: the same ClientApp every engine uses."""

from term_fl.client_app import app

__all__ = ["app"]
