"""Put ``mcptape record`` between an MCP host (Claude Desktop and friends) and its servers.

A host's config names each stdio server by ``command`` + ``args``. Installing rewrites the entry
to ``<mcptape> record --name <server> [--db <db>] -- <command> <args…>`` and nothing else: the
``env``, ``cwd``, ``type`` and every other field stay as they were, so the host launches mcptape
with the server's own environment and working directory, and mcptape launches the server with
them unchanged.

Why the file is edited by text spans rather than loaded and dumped: users keep these files by hand
(VS Code's are JSON *with comments* and trailing commas), hosts rewrite them in their own style,
and ``uninstall`` promises the original bytes back. So the file is parsed into a tree that knows
where every value starts and ends, and only the ``command`` value and the start of the ``args``
array are touched. The inserted text copies the array's own layout (inline, or one item per line
with the same indentation and line ending), which makes the edit exactly reversible: unwrapping
deletes what was inserted, and nothing else moves.

Why there is a backup *and* an entry-by-entry undo: the backup (``<config>.mcptape-backup``, the
bytes before mcptape first changed the file) gives a byte-identical restore when only mcptape
touched the file since; once the user or the host edited other entries, putting the backup back
would lose their edits, so ``uninstall`` then unwraps entry by entry. A small manifest beside it
(``<config>.mcptape-backup.json``) remembers what mcptape last wrote, which tells the two cases
apart.

Why every write re-reads the file first: hosts (Claude Code in particular) rewrite their config
while they run. The new content goes to a temporary file next to the config; just before the
atomic rename the config is read again, and if its bytes changed since we planned, nothing is
replaced and the user is told to try again.

Everything that depends on the machine — home directory, OS layout, environment variables, the
path of the mcptape executable — is a parameter (:class:`HostEnv`, ``mcptape=``) so the tests
run every host and OS layout in temporary homes.

The rooms, in the order a change flows through them:

- :mod:`~mcp_proxy.hosts.registry` — the hosts, where their configs live per OS, the errors;
- :mod:`~mcp_proxy.hosts.jsonc` — JSON with comments parsed into a tree of spans;
- :mod:`~mcp_proxy.hosts.entries` — what an entry launches, and whether mcptape wraps it;
- :mod:`~mcp_proxy.hosts.document` — a config file's server entries, by each host's layout;
- :mod:`~mcp_proxy.hosts.edits` — the reversible text edits that wrap and unwrap an entry;
- :mod:`~mcp_proxy.hosts.files` — snapshots, atomic writes, backups and their manifest;
- :mod:`~mcp_proxy.hosts.plan` — install/uninstall as a plan shown before it is applied;
- :mod:`~mcp_proxy.hosts.doctor` — listing and diagnosis (the database half lives in the store:
  :mod:`mcp_proxy.store.status`).
"""

from __future__ import annotations

from mcp_proxy.hosts.doctor import Check, check_targets, find_mcptape, list_servers
from mcp_proxy.hosts.entries import ServerEntry
from mcp_proxy.hosts.files import backup_paths, check_writable
from mcp_proxy.hosts.jsonc import JsonSyntaxError, parse_jsonc
from mcp_proxy.hosts.plan import Outcome, Plan, apply_plan, plan_install, plan_uninstall
from mcp_proxy.hosts.registry import (
    HOSTS,
    OS_NAMES,
    ConfigChanged,
    ConfigError,
    ConfigNotFound,
    ConfigTarget,
    Host,
    HostEnv,
    current_os,
    resolve_targets,
)

__all__ = [
    "HOSTS",
    "OS_NAMES",
    "Check",
    "ConfigChanged",
    "ConfigError",
    "ConfigNotFound",
    "ConfigTarget",
    "Host",
    "HostEnv",
    "JsonSyntaxError",
    "Outcome",
    "Plan",
    "ServerEntry",
    "apply_plan",
    "backup_paths",
    "check_targets",
    "check_writable",
    "current_os",
    "find_mcptape",
    "list_servers",
    "parse_jsonc",
    "plan_install",
    "plan_uninstall",
    "resolve_targets",
]
