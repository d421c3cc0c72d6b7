"""The seam between clients and server actors.

``base`` defines ``Transport`` and the typed clients (``BrokerClient``, ``HoldClient``,
``CoordinatorClient``) whose methods are the operations of ``rayq.actors.protocol``;
``ray_actors`` implements it with Ray actor calls; ``context`` holds what a client
shares (its transport, config, signer and route cache). ``rayq.testing`` implements
it in-process over the real server objects.
"""
