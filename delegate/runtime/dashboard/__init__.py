"""`delegate dashboard`: a local web page on the jobs, live over server-sent events.

The optional `web` extra (starlette, uvicorn, sse-starlette) is imported only by `server`; the
other modules here (`snapshot`, `live`, `guard`) are plain Python, so the rest of the toolkit,
and the tests of their logic, never need it.
"""

EXTRA_MODULES = ("starlette", "uvicorn", "sse_starlette")
INSTALL_HINT = "the dashboard needs the web extra: pip install 'delegate[web]'"
