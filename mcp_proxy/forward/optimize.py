"""mitmproxy compiled as ``python -O`` would compile it, for ``record --forward`` only.

mitmproxy guards debug checks with ``__debug__`` and ``assert`` on its hot path: every HTTP
message type-checks each of its fields when made (``MessageData.__post_init__``), every
state-machine step of a layer checks its event's type (``proxy.utils.expect``, whose ``else``
branch — the plain method — is the one meant for optimized runs), and ~100 asserts sit in its
layers. Under ``-O`` they are gone; measured through ``record --forward`` (SDK calls, interleaved
rounds) that is about 11–12% of the proxy's CPU per call in both protocol eras.

Re-executing the CLI under ``-O`` would pay a second interpreter start and strip every assert in
every package. Instead :func:`install` puts a finder in front of ``sys.meta_path`` that loads
only the ``mitmproxy`` package's modules compiled with ``optimize=1``, cached beside the source
as ``*.opt-1.pyc`` (the file ``python -O`` itself reads and writes, validated the same way by
source mtime and size), so a plain ``mitmdump`` keeps its own, unoptimized cache. It must run
before mitmproxy is first imported; after that it does nothing and says so. Only
``mcptape record --forward`` calls it (not ``mitmdump -s addons/mcptape.py``, not the tests'
in-process use of mitmproxy); ``MCPTAPE_FORWARD_TUNING=off`` skips it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import marshal
import os
import sys
from collections.abc import Sequence
from types import CodeType, ModuleType
from typing import Any

__all__ = ["OptimizedFinder", "install", "is_optimized"]

PACKAGE = "mitmproxy"
OPTIMIZE = 1


class _OptimizedLoader(importlib.machinery.SourceFileLoader):
    """A source loader that compiles with ``optimize=1`` and caches in ``.opt-1.pyc``."""

    def get_code(self, fullname: str) -> CodeType:
        source_path = self.get_filename(fullname)
        st = os.stat(source_path)
        mtime, size = int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF
        try:
            cache: str | None = importlib.util.cache_from_source(source_path, optimization=OPTIMIZE)
        except NotImplementedError:  # no cache tag: no bytecode caching on this Python
            cache = None
        header = (
            importlib.util.MAGIC_NUMBER
            + (0).to_bytes(4, "little")
            + mtime.to_bytes(4, "little")
            + size.to_bytes(4, "little")
        )
        if cache is not None:
            try:
                with open(cache, "rb") as f:
                    data = f.read()
            except OSError:
                pass
            else:
                if data[:16] == header:
                    code = marshal.loads(data[16:])
                    if isinstance(code, CodeType):
                        return code
        source = self.get_data(source_path)
        code = compile(source, source_path, "exec", dont_inherit=True, optimize=OPTIMIZE)
        if cache is not None and not sys.dont_write_bytecode:
            try:
                self.set_data(cache, header + marshal.dumps(code))
            except (OSError, NotImplementedError):
                pass  # a read-only install: compiled again on the next start
        return code


class OptimizedFinder:
    """``sys.meta_path`` finder: the ``mitmproxy`` package from source, optimized."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec  # an extension module, a namespace package: as it is
        assert spec.origin is not None
        loader: Any = _OptimizedLoader(fullname, spec.origin)
        spec.loader = loader
        return spec


def install() -> bool:
    """Load mitmproxy optimized from now on; False if it is imported already (nothing done)."""
    if any(isinstance(f, OptimizedFinder) for f in sys.meta_path):
        return True
    if PACKAGE in sys.modules or sys.flags.optimize >= OPTIMIZE:
        return sys.flags.optimize >= OPTIMIZE
    sys.meta_path.insert(0, OptimizedFinder())
    return True


def is_optimized() -> bool:
    """Whether the loaded mitmproxy runs without its debug checks (``__debug__`` false)."""
    from mitmproxy import http

    return "__post_init__" not in vars(http.MessageData)
