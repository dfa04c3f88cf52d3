"""`NamedTuple` for the modules a fresh `delegate publish` loads, without importing `typing`
(~3 ms of each run, beside the ForwardRef it makes of every string annotation).

`class Job(NamedTuple): ...` builds what `typing.NamedTuple` builds: a `collections.namedtuple`
with the annotated fields (those with a value are its defaults), the class body's methods,
properties and docstring, and `__annotations__` as written (strings, under
`from __future__ import annotations`). The type checker sees `typing.NamedTuple` itself:

    TYPE_CHECKING = False
    if TYPE_CHECKING:
        from typing import NamedTuple
    else:
        from delegate.core.records import NamedTuple
"""

from __future__ import annotations

from collections import namedtuple

TYPE_CHECKING = False  # the point of this module: no typing at run time
if TYPE_CHECKING:
    from typing import Any

# What typing.NamedTuple refuses to let a class body replace, and what it does not copy over
_PROHIBITED = frozenset(
    {
        "__new__",
        "__init__",
        "__slots__",
        "__getnewargs__",
        "_fields",
        "_field_defaults",
        "_make",
        "_replace",
        "_asdict",
        "_source",
    }
)
_SPECIAL = frozenset({"__module__", "__name__", "__annotations__"})


class _RecordMeta(type):
    def __new__(cls, typename: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> Any:
        if not bases:  # NamedTuple itself
            return super().__new__(cls, typename, bases, namespace)
        if bases != (NamedTuple,):
            raise TypeError("a record inherits from NamedTuple alone")
        annotations = namespace.get("__annotations__", {})
        defaults = []
        for field in annotations:
            if field in namespace:
                defaults.append(namespace[field])
            elif defaults:
                raise TypeError(f"field {field} without a default follows one with a default")
        # what typing.NamedTuple builds on (mypy wants literals for a namedtuple it checks)
        fields, module = list(annotations), namespace["__module__"]
        record = namedtuple(typename, fields, defaults=defaults, module=module)  # type: ignore[misc]
        record.__annotations__ = record.__new__.__annotations__ = dict(annotations)
        for key, value in namespace.items():
            if key in _PROHIBITED:
                raise AttributeError(f"Cannot overwrite NamedTuple attribute {key}")
            if key not in _SPECIAL and key not in record._fields:
                setattr(record, key, value)
        return record


class NamedTuple(metaclass=_RecordMeta):
    """Subclass it as `typing.NamedTuple` (see the module docstring)."""
