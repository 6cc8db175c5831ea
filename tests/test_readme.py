"""The README's embedded-log example runs as written (on a temporary directory)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_embedded_log_example_runs(tmp_path: Path, capsys) -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## The embedded log"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code = code.replace('"/var/lib/myapp/log"', repr(str(tmp_path / "log")))
    exec(compile(code, str(README), "exec"), {})
    out = capsys.readouterr().out
    assert "RecordMetadata(" in out and "offset=0" in out
    assert len(out.splitlines()) > 100           # the consumer printed what it polled
