"""``docs/design.md`` stays true about the tree: every source file of the package is named in it
(by its path below ``src/kafkalog``, e.g. ``log/read/reader.py``), and every such path it names
exists."""

from __future__ import annotations

import re
from pathlib import Path

import kafkalog

PACKAGE = Path(kafkalog.__file__).parent
DESIGN = PACKAGE.parents[1] / "docs" / "design.md"
SOURCE_SUFFIXES = (".py", ".pyx", ".pxd")


def _named(doc: str, path: str) -> bool:
    """Whether ``doc`` names ``path`` whole (``cli/dump.py`` is not named by ``cli/dump_indexes.py``
    nor by ``x/cli/dump.py``)."""
    return re.search(r"(?<![\w/.])" + re.escape(path) + r"(?![\w/])", doc) is not None


def source_files() -> list[str]:
    files = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*")
             if p.suffix in SOURCE_SUFFIXES and p.name != "__init__.py"
             and "__pycache__" not in p.parts]
    outside = [p.name for p in PACKAGE.parent.glob("*.py")]      # src/pyspark_kafkalog.py
    return sorted(files) + [f"src/{n}" for n in sorted(outside)]


def test_every_source_file_is_named_in_the_design():
    doc = DESIGN.read_text()
    missing = [f for f in source_files() if not _named(doc, f)]
    assert missing == [], f"docs/design.md names none of: {', '.join(missing)}"


def test_every_source_path_the_design_names_exists():
    doc = DESIGN.read_text()
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    named = set(re.findall(r"(?<![\w/.])((?:[a-z_]+/)+[\w]+\.(?:py|pyx|pxd))(?![\w])", doc))
    ours = {n for n in named if n.split("/", 1)[0] in packages}
    stale = sorted(n for n in ours if not (PACKAGE / n).is_file())
    assert stale == [], f"docs/design.md names files that do not exist: {', '.join(stale)}"


def test_the_check_sees_a_missing_name():
    """Not vacuous: a file path is found only where it is named whole."""
    doc = "`cli/dump_indexes.py` and `x/cli/verify.py`"
    assert _named(doc, "cli/dump_indexes.py")
    assert not _named(doc, "cli/dump.py") and not _named(doc, "cli/verify.py")
