"""Serve one function of `main` over HTTP the way Cloud Run's functions runtime does: the
worker `on_flow_run_updated` (default), `advance_flow`, or the reaper `reap_expired_leases`.

functions-framework 3.10 builds a Flask app and runs it under gunicorn on Linux (one worker
process, `gthread` worker with `$THREADS` threads, default 4 per CPU), so concurrent events
are handled concurrently; where gunicorn is unavailable it falls back to Flask's server.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

FUNCTION_TARGET = "on_flow_run_updated"
SIGNATURE_TYPE = "cloudevent"
# Every function main.py serves, and how functions-framework must call it.
SIGNATURES: dict[str, str] = {
    FUNCTION_TARGET: SIGNATURE_TYPE,
    "advance_flow": "cloudevent",
    "reap_expired_leases": "http",
}


def main_source_path() -> Path:
    """The file functions-framework loads the function from (it wants a path, not a module)."""
    return Path(__file__).resolve().with_name("main.py")


def create_function_app(target: str = FUNCTION_TARGET) -> Any:
    """The WSGI (Flask) app serving one function; also handy for `test_client()`."""
    import functions_framework

    source = main_source_path()
    path_before = list(sys.path)
    # functions-framework ships no annotations: its calls are untyped
    app = functions_framework.create_app(  # type: ignore[no-untyped-call]
        target=target, source=str(source), signature_type=SIGNATURES[target]
    )
    # create_app appends the source's directory to sys.path so a function can import its
    # siblings; ours uses absolute imports, and that entry would let `import logs` or
    # `import settings` resolve to our package's modules as top-level ones.
    if str(source.parent) not in path_before:
        sys.path[:] = [entry for entry in sys.path if entry != str(source.parent)]
    return app


def run_server(
    port: int, host: str = "0.0.0.0", *, threads: int | None = None, target: str = FUNCTION_TARGET
) -> None:
    """Blocks serving on host:port until the process is stopped (SIGTERM/SIGINT).

    `threads` overrides functions-framework's default (`$THREADS`, else 4 per CPU).
    """
    from functions_framework._http import create_server

    options: dict[str, Any] = {} if threads is None else {"threads": threads}
    server = create_server(create_function_app(target), debug=False, **options)  # type: ignore[no-untyped-call]
    server.run(host, port)
