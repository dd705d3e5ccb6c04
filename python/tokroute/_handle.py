"""What every wrapped C object shares: the handle, close() (idempotent, also on garbage collection), the context
manager, and closing what depends on it first (a context before its model), so a Python program can never hand the
library a freed object."""
from __future__ import annotations

import weakref

from ._lib import Error


class Handle:
    _free = None  # the C function freeing the handle

    def __init__(self):
        self._ptr = None
        self._dependents = weakref.WeakSet()

    def _depend_on(self, *owners) -> None:
        """Keeps the owners alive as long as this object and closes this object when one of them is closed."""
        self._owners = [o for o in owners if o is not None]
        for o in self._owners:
            o._dependents.add(self)

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def _handle(self):
        if self._ptr is None:
            raise Error(9, f"{type(self).__name__} is closed")
        return self._ptr

    def _claim(self, generation) -> None:
        """A generation starts using this object: a running one that used it is stopped first."""
        previous = self._generation() if getattr(self, "_generation", None) else None
        if previous is not None and previous is not generation:
            previous.stop()
        self._generation = weakref.ref(generation)

    def close(self) -> None:
        """Frees the C object (and first every object that uses it, and a generation running on it). Idempotent."""
        running = self._generation() if getattr(self, "_generation", None) else None
        if running is not None:
            running.stop()
        for d in list(getattr(self, "_dependents", ())):
            d.close()
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr is not None and type(self)._free is not None:
            type(self)._free(ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
