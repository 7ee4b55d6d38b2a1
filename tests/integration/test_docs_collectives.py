"""The Python examples in the README's "Collectives and topology" section run as written."""

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "README.md"


def test_python_examples_run():
    section = DOC.read_text().split("\n## Collectives and topology\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(DOC), "exec"), {})
        assert out.getvalue().strip()
