"""local_ccm.records.dataclass: a frozen class behaves as the standard library's would."""

from __future__ import annotations

import dataclasses
import pathlib
import re
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

import pytest

from local_ccm import records

pytestmark = pytest.mark.unit
T = TypeVar("T")
Decorator = Callable[..., Any]
BOTH = pytest.mark.parametrize("make", [dataclasses.dataclass, records.dataclass],
                               ids=["stdlib", "records"])  # fmt: skip


def _point(make: Decorator) -> Any:
    @make(frozen=True)
    class Point:
        x: int
        y: str = "y"
        tags: tuple[str, ...] = dataclasses.field(default_factory=tuple)
        note: str = dataclasses.field(default="n", compare=False, repr=False)
        seen: frozenset[str] = dataclasses.field(init=False, default_factory=frozenset)

    return Point


def _observable(p: Any) -> tuple[Any, ...]:
    return (repr(p), dataclasses.asdict(p), dataclasses.astuple(p),
            [f.name for f in dataclasses.fields(p)], type(p).__match_args__)  # fmt: skip


def test_every_observable_matches_the_standard_library() -> None:
    ours, std = _point(records.dataclass), _point(dataclasses.dataclass)
    for args, kwargs in (((1,), {}), ((1, "a", ("t",), "m"), {}), ((), {"x": 2, "note": "z"})):
        a, b = ours(*args, **kwargs), std(*args, **kwargs)
        assert _observable(a) == _observable(b)
        assert _observable(dataclasses.replace(a, y="r")) == _observable(
            dataclasses.replace(b, y="r")
        )
    assert dataclasses.is_dataclass(ours)


@BOTH
def test_equality_and_hash_follow_the_compared_fields(make: Decorator) -> None:
    point = _point(make)
    a, b = point(1, note="one"), point(1, note="other")
    assert a == b
    assert hash(a) == hash(b)
    assert a != point(2)
    assert a != (1, "y")
    assert len({a, b, point(2)}) == 2


@BOTH
def test_assignment_and_deletion_raise_frozen_instance_error(make: Decorator) -> None:
    p = _point(make)(1)
    with pytest.raises(dataclasses.FrozenInstanceError, match="'x'"):
        p.x = 2
    with pytest.raises(dataclasses.FrozenInstanceError, match="'x'"):
        del p.x
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.other = 1  # not a field either: the class itself is frozen


@BOTH
def test_factories_give_each_instance_its_own_value(make: Decorator) -> None:
    @make(frozen=True)
    class Bag:
        items: list[int] = dataclasses.field(default_factory=list)
        extra: dict[str, int] = dataclasses.field(init=False, default_factory=dict)

    new: Any = Bag  # type checkers cannot see through the parametrised decorator
    a, b = new(), new()
    assert a.items is not b.items
    assert a.extra is not b.extra
    assert new([1]).items == [1]
    with pytest.raises(TypeError):
        new(extra={})


@BOTH
def test_post_init_runs_after_the_fields_are_set(make: Decorator) -> None:
    @make(frozen=True)
    class Checked:
        low: int
        high: int

        def __post_init__(self) -> None:
            if self.low > self.high:
                raise ValueError(f"{self.low} > {self.high}")

    new: Any = Checked
    assert new(1, 2).high == 2
    with pytest.raises(ValueError, match="3 > 2"):
        new(3, 2)


@BOTH
def test_inherited_fields_come_first_and_subclasses_stay_frozen(make: Decorator) -> None:
    base = _point(make)

    @make(frozen=True)
    class Labelled(base):  # type: ignore[valid-type,misc]
        label: str = ""

    p = Labelled(1, label="l")
    assert (p.x, p.label) == (1, "l")
    assert p != base(1)  # different classes never compare equal
    assert [f.name for f in dataclasses.fields(p)][-1] == "label"
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.label = "m"


@BOTH
def test_a_plain_subclass_may_add_attributes_of_its_own(make: Decorator) -> None:
    class Plain(_point(make)):  # type: ignore[misc]
        pass

    p = Plain(1)
    p.cache = 3
    assert p.cache == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2


@BOTH
def test_methods_written_in_the_class_body_are_kept(make: Decorator) -> None:
    @make(frozen=True)
    class Custom:
        key: str
        payload: int = 0

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Custom) and self.key == other.key

        def __hash__(self) -> int:
            return hash(self.key)

        def __repr__(self) -> str:
            return f"<{self.key}>"

    new: Any = Custom
    assert new("a", 1) == new("a", 2)
    assert hash(new("a", 1)) == hash("a")
    assert repr(new("a")) == "<a>"


@BOTH
def test_a_written_eq_alone_still_gets_a_field_hash(make: Decorator) -> None:
    @make(frozen=True)
    class OnlyEq:  # noqa: PLW1641 (the decorator adds the hash under test)
        key: str

        def __eq__(self, other: object) -> bool:
            return isinstance(other, OnlyEq) and self.key.lower() == other.key.lower()

    new: Any = OnlyEq
    assert new("A") == new("a")
    assert OnlyEq.__hash__ is not None
    assert hash(new("a")) == hash(new("a"))


@BOTH
def test_writing_setattr_in_a_frozen_class_is_refused(make: Decorator) -> None:
    with pytest.raises(TypeError, match="__setattr__"):

        @make(frozen=True)
        class Bad:
            x: int

            def __setattr__(self, name: str, value: object) -> None:
                object.__setattr__(self, name, value)


@BOTH
def test_a_generic_class_can_be_instantiated_through_its_alias(make: Decorator) -> None:
    @make(frozen=True)
    class Box(Generic[T]):
        value: T

    new: Any = Box[int]
    assert new(3).value == 3  # typing's __orig_class__ assignment is absorbed


def test_other_forms_are_the_standard_library_unchanged() -> None:
    @records.dataclass(frozen=True, order=True)
    class Ordered:
        n: int

    @records.dataclass
    class Mutable:
        n: int

    assert Ordered(1) < Ordered(2)
    m = Mutable(1)
    m.n = 2
    assert m.n == 2


def test_init_var_is_refused_rather_than_ignored() -> None:
    with pytest.raises(TypeError, match="InitVar"):

        @records.dataclass(frozen=True)
        class WithInitVar:
            x: int
            scale: dataclasses.InitVar[int] = 1


@BOTH
def test_class_variables_are_not_fields(make: Decorator) -> None:
    @make(frozen=True)
    class WithClassVar:
        LIMIT: ClassVar[int] = 3
        n: int = 1

    new: Any = WithClassVar
    assert [f.name for f in dataclasses.fields(new())] == ["n"]
    assert new(2).LIMIT == 3


@BOTH
def test_a_field_named_like_the_generated_helpers_is_just_a_field(make: Decorator) -> None:
    @make(frozen=True)
    class Odd:
        _set: int
        _HAS_FACTORY: int = 0
        _default__set: str = "d"

    new: Any = Odd
    o = new(1, 2)
    assert (o._set, o._HAS_FACTORY, o._default__set) == (1, 2, "d")


def test_every_frozen_class_in_the_package_uses_the_cheaper_decorator() -> None:
    """Process start-up depends on it: each class the standard library builds costs ~0.5 ms."""
    root = pathlib.Path(records.__file__).parent
    offenders = [
        str(path.relative_to(root))
        for path in sorted(root.rglob("*.py"))
        if path.name != "records.py"
        if "@dataclass(frozen=True)" in (text := path.read_text())
        and not re.search(r"^from local_ccm\.records import dataclass$", text, re.M)
    ]
    assert offenders == []
