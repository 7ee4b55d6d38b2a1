"""The Python examples in docs/collectives.md ("Collectives and topology") run as written."""

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "collectives.md"


def test_python_examples_run():
    section = DOC.read_text()
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(DOC), "exec"), {})
        assert out.getvalue().strip()
