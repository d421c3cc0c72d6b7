"""The ``rayq`` command line (mqadmin's verbs, kcat's send and consume).

``main`` parses (``parser``, ``args``) and runs one command; ``session`` reaches the
deployment (its ``rayq://`` URL, or Ray for ``start``/``stop``: ``ray_join``);
``registry`` maps each command to its module: ``topics`` (topic, group),
``messages`` (message, offset, dlq), ``cluster`` (status, cluster, broker), ``send``,
``consume``, ``deploy`` (start, stop, console); ``output`` prints.
"""

from rayq.cli.main import main

__all__ = ["main"]
