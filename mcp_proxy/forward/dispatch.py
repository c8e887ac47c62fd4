"""A leaner hook dispatch for the mitmproxy master of ``record --forward``.

mitmproxy's :class:`~mitmproxy.addonmanager.AddonManager` delivers every event (about 25 per
proxied request: connection, TLS, layer and HTTP hooks, each followed by an ``update`` hook
for flow events) to every addon in its chain: per addon it creates and awaits a coroutine
(``invoke_addon``), enters a ``contextlib`` context manager (``safecall``), walks the addon's
sub-addons and looks the hook up by name — whether or not the addon has that hook. With the
twelve addons of ``record --forward`` that is ~300 coroutine + context-manager round trips
per request, measured at about a third of the proxy's CPU per call, for hooks that nearly all
resolve to nothing.

:class:`LeanAddonManager` keeps mitmproxy's behaviour and changes only the bookkeeping:

- for each hook name it remembers which addons of the chain implement it (a flat addon without
  sub-addons never changes its methods), and calls only those, in chain order, directly;
- an addon that has sub-addons (``ScriptLoader``: scripts are loaded and reloaded at run time)
  is walked on every event exactly as mitmproxy does, so a script's hooks are always seen;
- an addon that raises is logged the way mitmproxy logs it (``Addon error: …`` with its
  traceback, through the same ``safecall``) and the next addon still runs; ``AddonHalt`` stops
  the event, ``OptionsError`` propagates, as before;
- the remembered table is dropped whenever the chain changes (``add``, ``remove``, ``clear``).

Only the master ``record --forward`` builds uses it; ``mitmdump -s addons/mcptape.py`` runs
mitmproxy's own manager untouched.
"""

from __future__ import annotations

import inspect
from typing import Any

from mitmproxy import exceptions, flow, hooks
from mitmproxy.addonmanager import AddonManager, safecall, traverse

__all__ = ["LeanAddonManager"]

#: A chain entry for one hook: ``(addon, bound hook)`` for a flat addon, ``(addon, None)`` for
#: one with sub-addons (walked per event, as mitmproxy does).
_Entry = tuple[Any, Any]


class LeanAddonManager(AddonManager):
    """mitmproxy's addon manager with a per-hook table of the addons that implement it."""

    def __init__(self, master: Any) -> None:
        super().__init__(master)
        self._table: dict[str, list[_Entry]] = {}

    # The chain changes: forget the table (it is rebuilt on the next event of each name).
    def add(self, *addons: Any) -> None:
        self._table.clear()
        super().add(*addons)
        self._table.clear()

    def remove(self, addon: Any) -> None:
        self._table.clear()
        super().remove(addon)
        self._table.clear()

    def clear(self) -> None:
        self._table.clear()
        super().clear()
        self._table.clear()

    def _entries(self, name: str) -> list[_Entry]:
        entries = self._table.get(name)
        if entries is None:
            entries = []
            for addon in self.chain:
                if hasattr(addon, "addons"):
                    entries.append((addon, None))
                    continue
                func = getattr(addon, name, None)
                if func is not None and callable(func):
                    entries.append((addon, func))
                elif func is not None and not inspect.ismodule(func):
                    # mitmproxy's own error for a non-callable attribute named like a hook.
                    entries.append((addon, None))
            self._table[name] = entries
        return entries

    async def trigger_event(self, event: hooks.Hook) -> None:
        entries = self._entries(event.name)
        if not entries:
            return
        args = event.args()
        for addon, func in entries:
            try:
                if func is None:
                    await self._walk(addon, event, args)
                    continue
                res = func(*args)
                if res is not None and inspect.isawaitable(res):
                    await res
            except exceptions.AddonHalt:
                return
            except exceptions.OptionsError:
                raise
            except Exception:
                with safecall():  # log it exactly as mitmproxy does, then go on
                    raise

    async def _walk(self, addon: Any, event: hooks.Hook, args: list[Any]) -> None:
        """mitmproxy's ``invoke_addon`` for an addon with sub-addons (``_iter_hooks`` inline)."""
        for a in traverse([addon]):
            func = getattr(a, event.name, None)
            if not func:
                continue
            if callable(func):
                res = func(*args)
                if res is not None and inspect.isawaitable(res):
                    await res
            elif not inspect.ismodule(func):
                raise exceptions.AddonManagerError(f"Addon handler {event.name} ({a}) not callable")

    async def handle_lifecycle(self, event: hooks.Hook) -> None:
        message = event.args()[0]
        await self.trigger_event(event)
        if isinstance(message, flow.Flow) and self._entries(hooks.UpdateHook.name):
            await self.trigger_event(hooks.UpdateHook([message]))
