"""A seeded nemesis soak with a history checker (Jepsen-style), issue 27 part 1.

Clients with known contracts send and consume while a nemesis injects faults drawn from
a seed; everything they see goes to a :class:`~soak.history.History`, and
:func:`soak.checker.check` reads it afterwards. ``python -m soak`` (with ``tests/`` on
``sys.path``; ``make soak``) runs it from the command line; ``test_soak.py`` runs two
short soaks in CI and ``test_checker.py`` tests the checker on hand-made histories.
"""
