"""The served functions, in this process, are the module the tests import.

functions-framework loads `functions/main.py` from its path as a second module named `main`
(`_function_registry.load_function_module`): the same file, the same code, but another module
object. Here it serves `worker_chart_export.functions.main` itself, so what a test drives
through the Flask app is the very module it imports and patches (and the module mutmut
mutates: its mutants are chosen by module name, and `main` is not that name). The file is
still loaded the real way by the CLI's `serve`, the integration tests' served processes and
test_serve.py's app that functions-framework builds itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from functions_framework import _function_registry

from worker_chart_export.functions import main


def _the_imported_main(source: str) -> tuple[Any, Any]:
    assert source == str(main.__file__), source  # serve.py asks for main.py and nothing else
    already_executed = SimpleNamespace(loader=SimpleNamespace(exec_module=lambda module: None))
    return main, already_executed


@pytest.fixture(scope="module")
def served_main() -> Iterator[None]:
    """For an app built while it is active (`create_function_app`): the imported module served."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_function_registry, "load_function_module", _the_imported_main)
        yield
