"""The Python API's arguments checked against their types at the entry (``anonymize``, ``Runner``, ``recover``),
before any work: a number where a path goes, a string where a number goes, a list for a number, None for a
config section. Without this they failed deep inside (pathlib's TypeError, a comparison in the detector after
the new key file was made, an AttributeError) or were taken as they were (crf [18], new_key "no").

``ArgumentError`` is a TypeError and a StreamdeidError: Python callers catch the one, a folder or batch run
says the other in one line.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from numbers import Integral, Real

from .types import StreamdeidError


class ArgumentError(StreamdeidError, TypeError):
    """An API argument or a config field of the wrong type; the message names it and the type it takes."""


PATH = typing.Union[str, os.PathLike]
#: dataclass fields annotated ``str`` that name files: a ``pathlib.Path`` is as good there
PATH_FIELDS = frozenset({"model_path", "export_tracks", "references", "key_file", "edits", "report", "stats_json"})


def check_arg(name: str, value, hint) -> None:
    """``value`` of the argument ``name`` fits ``hint`` (a type, ``X | None``, ``list[int]``, a dataclass: its fields
    are checked too, under ``name.field``), else ``ArgumentError``."""
    if not _fits(value, hint):
        raise ArgumentError(f"{name} must be {_describe(hint)}, not {_what(value)}")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        check_fields(value, name)


def check_fields(obj, name: str) -> None:
    """Every init field of the dataclass ``obj`` fits its annotation (nested dataclasses too)."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        if f.init and f.name in hints:
            hint = hints[f.name]
            if f.name in PATH_FIELDS:
                hint = _as_path(hint)
            check_arg(f"{name}.{f.name}", getattr(obj, f.name), hint)


_HINTS: dict[type, dict] = {}


def _hints(cls: type) -> dict:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _as_path(hint):
    """``str`` -> a path (``str`` or ``os.PathLike``), also inside ``| None`` and ``list[...]``."""
    if hint is str:
        return PATH
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_as_path(a) for a in args)]
    if origin in (list, tuple) and args:
        return origin[tuple(_as_path(a) for a in args)]
    return hint


def _fits(value, hint) -> bool:
    if hint is typing.Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, Real) and not isinstance(value, bool)
    if origin in (list, tuple):  # a list or a tuple either way (a str is no list of paths)
        if not isinstance(value, (list, tuple)):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(_fits(v, a) for v, a in zip(value, args))
        return not args or all(_fits(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items()) \
            if args else isinstance(value, dict)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # an annotation this does not read: not checked


def _describe(hint) -> str:
    if hint is None or hint is type(None):
        return "None"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if set(args) >= {str, os.PathLike}:
            rest = [a for a in args if a not in (str, os.PathLike)]
            return " or ".join(["a path (str or os.PathLike)"] + [_describe(a) for a in rest])
        return " or ".join(_describe(a) for a in args)
    if origin in (list, tuple):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return f"a tuple of {len(args)} {_plural(args[0])}"
        return f"a list of {_plural(args[0])}" if args else "a list"
    if origin is dict:
        return "a dict"
    return {bool: "True or False", int: "an int", float: "a number", str: "a str"}.get(
        hint, f"a {getattr(hint, '__name__', hint)}")


def _plural(hint) -> str:
    one = _describe(hint)
    if one.startswith("a path"):
        return "paths" + one[len("a path"):]
    return {"an int": "ints", "a number": "numbers", "a str": "strs"}.get(one, one)


def _what(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)) and value:
        inner = sorted({type(v).__name__ for v in value})
        return f"a {type(value).__name__} holding {', '.join(inner)}"
    return type(value).__name__
