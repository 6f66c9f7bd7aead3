"""README.md's "From Python" snippet runs as written, and prints what it says."""

from __future__ import annotations

import contextlib
import io
import re

from conftest import REPO


def test_the_readme_python_snippet_runs():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## From Python"):readme.index("## Using it from a trainer")]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0] == "10322706432"  # qwen3_vl_2b's dense_per_token (test_flop_model derives it by hand)
    assert int(lines[1]) > 0
    # Two records (steps 1 and 2: each on_log returns the previous interval's), then the health counters.
    assert [line.split()[0] for line in lines[2:4]] == ["1", "2"]
    assert all(float(line.split()[2]) == 2900 / 1200 for line in lines[2:4])
    assert lines[4].startswith("{'bad_microbatches': 0")
