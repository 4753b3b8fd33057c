"""YAML with positions: the data of a document plus the line and column of every key and value.

The loader reads YAML the way editors (YAML 1.2) do where it matters for routines: only
`true`/`false` are booleans (`yes`, `no`, `on`, `off` stay strings) and dates stay strings. What
could make a small text cost much to read is refused at its line and column (`YamlRefused`): aliases
(`*name`: a few hundred bytes of aliases can expand to gigabytes), nesting deeper than `MAX_DEPTH`
levels, more than `MAX_VALUES` values, and integers beyond what JSON carries exactly (2^53 - 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

Path = tuple[Any, ...]
MAX_DEPTH = 64
MAX_VALUES = 50_000
"""Values (keys, texts, numbers, lists and maps) a document may hold: a 1,000-item `foreach:` of maps of
eight fields holds ~17,000. Reading one costs ~7 us in Python; a 2 MiB request could list a million."""
MAX_INTEGER = 2**53 - 1


class YamlRefused(yaml.MarkedYAMLError):
    """Well-formed YAML that a routine does not take (an alias, too deep, a huge integer)."""


def _int_within(loader: yaml.constructor.SafeConstructor, node: yaml.ScalarNode) -> int:
    digits = str(node.value).replace("_", "").lstrip("+-")
    if len(digits) > 20:  # int() of thousands of digits is slow, and beyond 2^53 anyway
        raise YamlRefused(
            problem=f"the integer {node.value[:24]}... is too large", problem_mark=node.start_mark
        )
    value: int = yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)
    if abs(value) > MAX_INTEGER:
        raise YamlRefused(
            problem=f"the integer {node.value} is beyond {MAX_INTEGER}, the largest JSON carries exactly",
            problem_mark=node.start_mark,
        )
    return value


def _alias_refused(event: Any) -> YamlRefused:
    return YamlRefused(
        problem=f"the alias *{event.anchor} is not accepted in a routine: write the value out "
        "(aliases can expand a small file without bound)",
        problem_mark=event.start_mark,
    )


def _too_many(mark: Any) -> YamlRefused:
    return YamlRefused(
        problem=f"a routine holds at most {MAX_VALUES:,} values (keys, texts, numbers, lists and maps); "
        "this one holds more",
        problem_mark=mark,
    )


def _too_deep(mark: Any) -> YamlRefused:
    return YamlRefused(
        problem=f"values nested deeper than {MAX_DEPTH} levels are not accepted", problem_mark=mark
    )


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans and no timestamps; no aliases, bounded depth and integers."""

    _depth = 0
    _values = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise _alias_refused(self.peek_event())
        self._values += 1
        if self._values > MAX_VALUES:
            raise _too_many(self.peek_event().start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _too_deep(self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)  # type: ignore[type-var]
_Loader.add_constructor("tag:yaml.org,2002:int", _int_within)  # type: ignore[type-var]

_FastLoader: Any = None
if yaml.__with_libyaml__:

    class _CLoader(yaml.CSafeLoader):  # type: ignore[name-defined,misc]
        """The same reading as _Loader's, by libyaml (~6x faster: a list of 100,000 items took 3.9 s in
        PyYAML's pure-Python composer, 0.6 s here); aliases and depth are checked on its events first."""

    _CLoader.yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers
    _CLoader.yaml_constructors = _Loader.yaml_constructors
    _FastLoader = _CLoader


@dataclass
class Located:
    """A YAML document's data with the node of each value and key, by path (keys and list indexes)."""

    text: str
    value: Any
    values: dict[Path, yaml.Node] = field(default_factory=dict)
    keys: dict[Path, yaml.Node] = field(default_factory=dict)
    problems: list[tuple[int, int, str]] = field(default_factory=list)

    def get(self, path: Path) -> Any:
        """The data at a path, or None."""
        value = self.value
        for part in path:
            try:
                value = value[part]
            except (KeyError, IndexError, TypeError):
                return None
        return value

    def known_prefix(self, path: Path) -> Path:
        """The longest prefix of `path` that names a node of the document."""
        path = tuple(path)
        while path and path not in self.values:
            path = path[:-1]
        return path

    def position(self, path: Path) -> tuple[int, int]:
        """1-based line and column of the value at `path` (or of its nearest known parent)."""
        node = self.values.get(self.known_prefix(path))
        if node is None:
            return (1, 1)
        return (node.start_mark.line + 1, node.start_mark.column + 1)

    def key_position(self, path: Path) -> tuple[int, int]:
        """1-based line and column of the key of the mapping entry at `path`."""
        node = self.keys.get(tuple(path))
        if node is None:
            return self.position(path)
        return (node.start_mark.line + 1, node.start_mark.column + 1)

    def offset_position(self, path: Path, occurrence: int, needle: str, extra: int) -> tuple[int, int]:
        """Where the `occurrence`-th `needle` of a scalar's source text is, plus `extra` characters.

        Used to point inside a string value at a `${{ }}` or at a spot inside one. Falls back to the
        value's own position when the source text does not hold it verbatim (escapes, folding).
        """
        node = self.values.get(tuple(path))
        if node is None:
            return self.position(path)
        start, end = node.start_mark.index, node.end_mark.index
        raw = self.text[start:end]
        index = -1
        for _ in range(occurrence + 1):
            index = raw.find(needle, index + 1)
            if index < 0:
                return self.position(path)
        target = min(start + index + extra, max(end - 1, start))
        line = self.text.count("\n", 0, target)
        column = target - (self.text.rfind("\n", 0, target) + 1)
        return (line + 1, column + 1)


def compose(text: str) -> Located:
    """Parse one YAML document, keeping every node's position.

    libyaml reads it when PyYAML has it; a text it finds is not YAML is read again by PyYAML's own parser
    (when under `REREAD_CHARS`), whose sentences say what was found where (libyaml's say less).

    Raises:
        yaml.YAMLError: the text is not YAML (`MarkedYAMLError` carries the position).
    """
    if _FastLoader is not None:
        try:
            _check_events(text)
            return _composed(text, _FastLoader)
        except YamlRefused:
            raise
        except yaml.YAMLError:
            if len(text) > REREAD_CHARS:
                raise
    return _composed(text, _Loader)


REREAD_CHARS = 64 * 1024
"""The longest text that libyaml found not YAML and PyYAML reads again for its sentence (PyYAML reads
~25,000 values a second: a larger text's syntax error is said in libyaml's words)."""


def _composed(text: str, loader_class: Any) -> Located:
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return Located(text=text, value=None)
        value = loader.construct_document(node)
    finally:
        loader.dispose()
    doc = Located(text=text, value=value)
    _index(doc, node, ())
    return doc


def _check_events(text: str) -> None:
    """Refuse aliases, nesting past MAX_DEPTH and more than MAX_VALUES values from libyaml's events,
    before any node is made.

    Raises:
        YamlRefused: at the alias, at the first value nested too deeply, or at the value past the most.
        yaml.YAMLError: the text is not YAML.
    """
    depth = values = 0
    for event in yaml.parse(text, Loader=_FastLoader):
        kind = type(event)
        if kind is yaml.AliasEvent:
            raise _alias_refused(event)
        if kind is yaml.ScalarEvent or kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            values += 1
            if values > MAX_VALUES:
                raise _too_many(event.start_mark)
        if kind is yaml.ScalarEvent:
            if depth + 1 > MAX_DEPTH:
                raise _too_deep(event.start_mark)
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            depth += 1
            if depth > MAX_DEPTH:
                raise _too_deep(event.start_mark)
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            depth -= 1


def _index(doc: Located, node: yaml.Node, path: Path) -> None:
    doc.values[path] = node
    if isinstance(node, yaml.MappingNode):
        first: dict[Any, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is None:
                continue
            if key in first:
                mark = first[key].start_mark
                doc.problems.append(
                    (
                        key_node.start_mark.line + 1,
                        key_node.start_mark.column + 1,
                        f"duplicate key '{key}' (first at line {mark.line + 1})",
                    )
                )
                continue
            first[key] = key_node
            doc.keys[(*path, key)] = key_node
            _index(doc, value_node, (*path, key))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index(doc, item, (*path, i))
