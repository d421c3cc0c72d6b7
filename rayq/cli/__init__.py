"""The ``rayq`` command line (mqadmin's verbs): ``main`` parses and dispatches, ``ops``
holds the output helpers, ``cluster`` the commands that start or inspect a cluster."""

from rayq.cli.main import main

__all__ = ["main"]
