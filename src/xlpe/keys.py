"""The one cache-key convention of xlpe: whatever is cached (a recipe's stage, the SSA labels of a teacher model)
declares its inputs as a frozen dataclass deriving from :class:`Inputs`, and its key is derived from that value,
never assembled by hand.

The key material of an inputs value is a dict of its fields:

* a field **without a default** always enters, under its name (or the name in its ``key`` metadata:
  :func:`keyed`);
* a field **with a default** enters only when its value differs from that default.

So a new option, added to a stage's inputs with a default that means "as before", never changes the key of a stage
that does not use it, and no stage carries a compatibility conditional. Files enter by content
(:func:`xlpe.experiments.engine.cache.file_sig`: name, size, hash), so a stage whose cheap input stage ran again with
the same output stays cached. Nested values (dicts, lists) enter as they are; a nested :class:`Inputs` enters by its own
key material. A whole config nested in a key (:func:`config_material`, e.g. the training options of a Cross-Align
stage) enters with every field, except the fields declared :func:`when_set` (``option(..., when_set=True)``), which
enter only when they differ from their default: every field added to such a config after keys held it is declared so
(tests/test_keys.py checks the fields of each such config against the list keys were made with). The key is a short
hash of the material's JSON with sorted keys (:func:`digest`); ``started.json`` and ``done.json`` of a stage record
the material beside it (the stage cache: :mod:`xlpe.experiments.engine.cache`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

_KEY = "key"
WHEN_SET = "key_when_set"


def keyed(name: str, default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING) -> Any:
    """A field that enters the key material under ``name`` instead of its own (a short name the key always had)."""
    meta = {_KEY: name}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def when_set(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, **metadata: Any) -> Any:
    """A config field that enters a key holding the whole config (:func:`config_material`) only when it differs from
    its default."""
    meta = {**metadata, WHEN_SET: True}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def config_material(cfg: Any, exclude: Any = ()) -> dict[str, Any]:
    """A config dataclass as key material: every field but those in ``exclude``, and those declared
    :func:`when_set` only when they differ from their default."""
    out = {}
    for f in dataclasses.fields(cfg):
        if f.name in exclude:
            continue
        value = getattr(cfg, f.name)
        if f.metadata.get(WHEN_SET) and _material(value) == _material(_default(f)):
            continue
        out[f.name] = _material(dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value)
    return out


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _material(value: Any) -> Any:
    if isinstance(value, Inputs):
        return value.key_material()
    if isinstance(value, dict):
        return {k: _material(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_material(v) for v in value]
    return value


@dataclasses.dataclass(frozen=True)
class Inputs:
    """Base of a stage's declared inputs (see the module docstring for the key rule)."""

    def key_material(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if not f.compare:                       # declared as not part of what the stage computes
                continue
            value, default = getattr(self, f.name), _default(f)
            if default is not dataclasses.MISSING and _material(value) == _material(default):
                continue
            out[f.metadata.get(_KEY, f.name)] = _material(value)
        return out

    def key(self) -> str:
        return digest(self.key_material())


def digest(obj: Any) -> str:
    """A short stable hash of a JSON-able object (sorted keys; non-JSON values by ``str``)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]
