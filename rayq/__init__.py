"""rayq: a RocketMQ-style message broker whose server parts are Ray actors."""
