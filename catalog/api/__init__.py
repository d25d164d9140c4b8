"""The HTTP layer: one module per resource, plus ``wire`` (JSON in/out, path codec, error body)."""
