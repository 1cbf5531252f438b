"""`dataclass` for the project's frozen value classes, built for a cheaper process start.

Every binary defines about a hundred frozen dataclasses at import. The standard library
compiles six methods per class, each from its own generated source (`__init__`, `__repr__`,
`__eq__`, `__hash__`, `__setattr__`, `__delattr__`), and, when docstrings are stripped as in
the image (`PYTHONOPTIMIZE=2`), builds a `__doc__` from `inspect.signature`: measured
0.5-0.7 ms per class, about 45 % of each binary's import time. Here `__init__`, `__eq__` and
`__hash__` are written as the standard library writes them (the same speed per call) and
compiled in one piece; `__repr__`, `__setattr__` and `__delattr__`, which no hot path calls,
are shared functions reading the class's field names. Measured: agent import 0.125 -> 0.087
CPU-s, node-ipam-controller 0.109 -> 0.082 (median of 21, `PYTHONOPTIMIZE=2`).

Usage is the standard library's: ``@dataclass(frozen=True)``, with `field`, `replace`,
`fields`, `asdict` and `astuple` from `dataclasses` working on the result, which *is* a
dataclass (`__dataclass_fields__`, `__match_args__`). What the standard library does for
``frozen=True`` holds here: positional and keyword `__init__` in field order, defaults and
``default_factory``, ``init=False`` fields, ``__post_init__``, ``repr``/``compare``/``hash``
per field, `FrozenInstanceError` on assignment and deletion, explicitly written dunders are
kept, and equal instances hash alike. Any other form (``frozen`` false, ``order``,
``kw_only``, ``slots``, ...) is handed to the standard library unchanged. Type checkers see
the standard `dataclasses.dataclass` (the `TYPE_CHECKING` branch), which describes both.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dataclasses import dataclass
else:

    def dataclass(cls: Any = None, /, **options: Any) -> Any:
        """`dataclasses.dataclass`, with ``frozen=True`` alone built by `_frozen`."""
        if options != {"frozen": True}:
            return dataclasses.dataclass(cls, **options)
        return _frozen if cls is None else _frozen(cls)


__all__ = ["dataclass"]

_HAS_FACTORY = object()  # the default of an __init__ parameter whose field has a factory


def _frozen(cls: type) -> type:
    own = cls.__dict__
    for name in ("__setattr__", "__delattr__"):
        if name in own:
            raise TypeError(f"cannot overwrite attribute {name} in class {cls.__name__}")
    if not own.get("__doc__"):
        # Set first: the standard library would otherwise derive one from inspect.signature.
        cls.__doc__ = cls.__name__
    # Field collection (inheritance, defaults, ClassVar, `field()`) is the standard library's;
    # with every generated method off it compiles nothing.
    dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    fields = dataclasses.fields(cls)  # the real ones: no ClassVar, no InitVar
    if any(map(_is_init_var, cls.__dataclass_fields__.values())):  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__}: InitVar fields need dataclasses.dataclass")
    compared = [f.name for f in fields if f.compare]
    hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
    cls._record_repr = tuple(f.name for f in fields if f.repr)  # type: ignore[attr-defined]
    # As the standard library: a __hash__ written in the class body stays; the implicit
    # `__hash__ = None` Python adds beside a written __eq__ does not count as written.
    keep_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    methods = _compile(cls, fields, compared, None if keep_hash else hashed)
    for name, method in methods.items():
        if name == "__hash__" or name not in own:
            setattr(cls, name, method)
    if "__repr__" not in own:
        cls.__repr__ = _repr  # type: ignore[method-assign,assignment]
    cls.__setattr__ = _setattr  # type: ignore[method-assign,assignment]
    cls.__delattr__ = _delattr  # type: ignore[method-assign,assignment]
    cls._record_frozen = cls  # type: ignore[attr-defined]
    return cls


def _is_init_var(f: dataclasses.Field[Any]) -> bool:
    """An `InitVar` pseudo-field, its annotation evaluated or (`from __future__ import
    annotations`) a string."""
    kind = f.type
    if isinstance(kind, str):
        return kind.startswith(("InitVar", "dataclasses.InitVar"))
    return kind is dataclasses.InitVar or isinstance(kind, dataclasses.InitVar)


def _compile(
    cls: type,
    fields: tuple[dataclasses.Field[Any], ...],
    compared: list[str],
    hashed: list[str] | None,
) -> dict[str, Any]:
    """`__init__`, `__eq__` and (unless `hashed` is None) `__hash__`, written as the standard
    library writes them, compiled together. Their own names start with `__`, which no field's
    can (a class body mangles it), so a field name never shadows them."""
    env: dict[str, Any] = {"__set": object.__setattr__, "__has_factory": _HAS_FACTORY}
    params, body = ["self"], []
    for f in fields:
        if f.default_factory is not dataclasses.MISSING:
            env[f"__factory_{f.name}"] = f.default_factory
            if f.init:
                params.append(f"{f.name}=__has_factory")
                value = f"__factory_{f.name}() if {f.name} is __has_factory else {f.name}"
            else:
                value = f"__factory_{f.name}()"
        elif not f.init:
            continue  # the class attribute holds its default
        elif f.default is dataclasses.MISSING:
            params.append(f.name)
            value = f.name
        else:
            env[f"__default_{f.name}"] = f.default
            params.append(f"{f.name}=__default_{f.name}")
            value = f.name
        body.append(f"  __set(self, {f.name!r}, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("  self.__post_init__()")
    lines = [f"def __init__({', '.join(params)}):", *(body or ["  pass"])]
    lines += ["def __eq__(self, other):",
              "  if other.__class__ is self.__class__:",
              f"    return {_tuple('self', compared)} == {_tuple('other', compared)}",
              "  return NotImplemented"]  # fmt: skip
    if hashed is not None:
        lines += ["def __hash__(self):", f"  return hash({_tuple('self', hashed)})"]
    exec("\n".join(lines), env)  # source built above from field names only
    methods: dict[str, Any] = {
        name: env[name] for name in ("__init__", "__eq__", "__hash__") if name in env
    }
    for name, method in methods.items():
        method.__qualname__ = f"{cls.__qualname__}.{name}"
        method.__module__ = cls.__module__
    return methods


def _tuple(owner: str, names: list[str]) -> str:
    return "(" + "".join(f"{owner}.{name}," for name in names) + ")"


def _repr(self: Any) -> str:
    values = ", ".join(f"{name}={getattr(self, name)!r}" for name in type(self)._record_repr)
    return f"{type(self).__qualname__}({values})"


def _setattr(self: Any, name: str, value: Any) -> None:
    cls = type(self)
    if cls._record_frozen is cls or name in cls.__dataclass_fields__:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _delattr(self: Any, name: str) -> None:
    cls = type(self)
    if cls._record_frozen is cls or name in cls.__dataclass_fields__:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
    object.__delattr__(self, name)
