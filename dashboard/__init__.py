"""The mcptape dashboard: browse, explain and annotate recorded MCP traffic in a browser.

aiohttp + Jinja2, rendered on the server, a ``.json`` twin for every page, live updates over
Server-Sent Events. Start it with ``mcptape dashboard``; build it in code with
:func:`dashboard.app.create_app`. See ``docs/dashboard.md``.
"""
