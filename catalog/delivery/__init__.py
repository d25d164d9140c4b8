"""Pushing change events to sinks: CloudEvents 1.0 over HTTP webhooks and NATS (``sinks``), from the
outbox, in order, at least once, one replica per sink at a time (``loop``)."""
