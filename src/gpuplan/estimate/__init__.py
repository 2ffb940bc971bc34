"""Estimators (L3): memory, compute, communication, timing and cost, pure numpy over arrays.

The package is also `gpuplan.estimate(...)`, the public API's one-configuration call: once a
module below is imported, Python binds this package to the name `gpuplan.estimate`, so calling
the package calls `gpuplan.api.estimate` (the lazy attribute of `gpuplan/__init__.py` returns
the same function before that).
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from ..api import estimate

        return estimate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
