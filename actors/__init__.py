"""Ray actors: thin shells over plain objects from rayq.store and the client logic."""
