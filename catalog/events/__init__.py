"""Change events, pure: what an event says (``records``). The rows are written by ``database/outbox.py``
in the change's own transaction; ``api/events.py`` serves them; ``delivery/`` pushes them."""
