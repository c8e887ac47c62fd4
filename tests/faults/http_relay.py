"""Run the HTTP relay with fault rules from a rules file (the faults tests' relay subprocess).

``python tests/faults/http_relay.py UPSTREAM DB RULES.toml`` is ``mcptape record --upstream
UPSTREAM --port 0 --db DB`` with ``faults=FaultEngine(source=RulesFile(RULES.toml))``: the
same ``record_http`` the CLI calls, so the relay, its recorder process and its stop line are
the real ones. The rules file is re-read when it changes, so one relay serves a whole test
module, each test writing the rules it needs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcp_proxy.faults import FaultEngine, RulesFile
from mcp_proxy.relay.http.run import record_http
from mcp_proxy.store.engine import resolve_url


def main() -> int:
    upstream, db, rules = sys.argv[1:4]
    source = RulesFile(Path(rules), interval=0.05, warn=lambda m: print(m, file=sys.stderr))
    engine = FaultEngine(source=source)
    return record_http(upstream, db_url=resolve_url(db), port=0, faults=engine)


if __name__ == "__main__":
    sys.exit(main())
