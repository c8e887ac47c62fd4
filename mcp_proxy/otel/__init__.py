"""OpenTelemetry: the one span builder (:mod:`~mcp_proxy.otel.spans`) behind both the
after-the-fact export (``recording/otlp.py``) and the live export of ``mcptape record``
(:mod:`~mcp_proxy.otel.live`, run in the recorder process). Imports only the core and
``store/rows.py``."""
