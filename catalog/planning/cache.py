"""Decoded manifests and manifest lists kept across plans: a bounded LRU keyed by path (the files
are immutable, so an entry never goes stale), counted in ``catalog_planning_manifest_cache_total``.
Readers of one missing path may both read it; the second result simply replaces the first."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from catalog import metrics


class ManifestCache:
    def __init__(self, size: int) -> None:
        """``size``: how many files are kept (0: none)."""
        self.size = size
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: str, load: Callable[[], Any]) -> Any:
        with self._lock:
            if path in self._items:
                self._items.move_to_end(path)
                metrics.PLANNING_MANIFEST_CACHE.labels("hit").inc()
                return self._items[path]
        metrics.PLANNING_MANIFEST_CACHE.labels("miss").inc()
        value = load()
        if self.size > 0:
            with self._lock:
                self._items[path] = value
                self._items.move_to_end(path)
                while len(self._items) > self.size:
                    self._items.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._items)
