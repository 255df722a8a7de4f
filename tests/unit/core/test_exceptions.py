"""core/exceptions.py: the tree drawn in its docstring is the tree its classes make."""

from __future__ import annotations

import inspect
import re

from worker_chart_export.core import exceptions

# "    │   ├── ClaimContended . the step ...": the depth from the indent, then the name; the
# root alone on its line. (Continuation lines have no branch, so they are never read as one.)
DRAWN = re.compile(r"^    (?:(?P<indent>(?:[│ ]   )*)[├└]── (?P<name>[A-Z]\w+)\b|(?P<root>[A-Z]\w+)$)")


def drawn_parents() -> dict[str, str | None]:
    doc = exceptions.__doc__ or ""
    parents: dict[str, str | None] = {}
    stack: list[str] = []
    for line in doc.splitlines():
        match = DRAWN.match(line)
        if match is None:
            continue
        name = match["name"] or match["root"]
        depth = 0 if match["root"] else len(match["indent"]) // 4 + 1
        del stack[depth:]
        parents[name] = stack[-1] if stack else None
        stack.append(name)
    return parents


def test_every_class_is_drawn_under_its_base() -> None:
    classes = {
        name: cls
        for name, cls in vars(exceptions).items()
        if inspect.isclass(cls) and issubclass(cls, exceptions.WorkerError)
    }
    parents = drawn_parents()
    assert set(parents) == set(classes)
    for name, cls in classes.items():
        (base,) = cls.__bases__
        expected = None if cls is exceptions.WorkerError else base.__name__
        assert parents[name] == expected, name


def test_adapters_raise_contention_the_service_decides_redelivery() -> None:
    assert issubclass(exceptions.ClaimContended, exceptions.StoreError)
    assert not issubclass(exceptions.ClaimContended, exceptions.RedeliverEvent)
    assert issubclass(exceptions.FinalizeFailed, exceptions.RedeliverEvent)


def test_the_module_imports_nothing_the_no_op_path_would_pay_for() -> None:
    source = inspect.getsource(exceptions)
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert imports == ["from __future__ import annotations"]
