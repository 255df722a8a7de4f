"""A mypy plugin (pyproject [tool.mypy] plugins): a literal key that `.get` reads from a
TypedDict must be one of its keys.

mypy checks `document["key"]` and a TypedDict's literals, but lets `document.get("typo")`
pass (a TypedDict may hold other keys at run time) and types it `object`, which often goes
unnoticed. The documents of core/documents.py hold every key of their schema
(tests/unit/core/test_documents.py), so a key they lack is a typo: reported as
`typeddict-unknown-key`. The type of the read is left to mypy's own hook.
tests/unit/test_mypy_typeddict_keys.py runs it.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.errorcodes import TYPEDDICT_UNKNOWN_KEY
from mypy.plugin import MethodContext, Plugin
from mypy.plugins.default import typed_dict_get_callback
from mypy.typeops import try_getting_str_literals
from mypy.types import Type, TypedDictType, get_proper_type


def _checked_get(ctx: MethodContext) -> Type:
    document = get_proper_type(ctx.type)
    if isinstance(document, TypedDictType) and ctx.args and ctx.args[0]:
        for key in try_getting_str_literals(ctx.args[0][0], ctx.arg_types[0][0]) or ():
            if key not in document.items:
                message = f'TypedDict "{document.fallback.type.name}" has no key "{key}"'
                ctx.api.fail(message, ctx.context, code=TYPEDDICT_UNKNOWN_KEY)
    return typed_dict_get_callback(ctx)


class TypedDictKeys(Plugin):
    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        # mypy's default plugin hooks the same name; a plugin listed first is asked first
        return _checked_get if fullname == "typing.Mapping.get" else None


def plugin(version: str) -> type[Plugin]:
    return TypedDictKeys
