"""The ctypes mirrors of the C ABI's structs (flopmeter/_native.py) match c_api.h: every struct's size and every
field's offset, as a C compiler lays them out, and every function the package calls is exported."""

from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from flopmeter import _native

from conftest import REPO


def c_layout(tmp_path: Path):
    """sizeof, and each field's offsetof and sizeof, of every mirrored struct, printed by a C program built against c_api.h."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler")
    # c_api.h includes the generated flopmeter/export.h; for layouts its macro only needs to exist.
    (tmp_path / "flopmeter").mkdir()
    (tmp_path / "flopmeter" / "export.h").write_text("#define FLOPMETER_EXPORT\n")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "flopmeter/c_api.h"', "int main(void) {",
             '  printf("{");']
    first = True
    for c_name, mirror in _native.structs_with_counts().items():
        entries = [f'\\"size\\": %zu'] + [f'\\"{f}\\": [%zu, %zu]' for f, _ in mirror._fields_]
        args = [f"sizeof({c_name})"] + [f"offsetof({c_name}, {f}), sizeof((({c_name}*)0)->{f})"
                                        for f, _ in mirror._fields_]
        sep = "" if first else ", "
        first = False
        lines.append(f'  printf("{sep}\\"{c_name}\\": {{{", ".join(entries)}}}", {", ".join(args)});')
    lines += ['  printf("}\\n");', "  return 0;", "}"]
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([compiler, "-std=c99", "-Wall", "-Werror", f"-I{tmp_path}", f"-I{REPO / 'include'}", str(source),
                    "-o", str(exe)], check=True)
    return json.loads(subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout)


def test_every_mirrored_struct_has_the_headers_size_and_offsets(tmp_path):
    layout = c_layout(tmp_path)
    for c_name, mirror in _native.structs_with_counts().items():
        expected = layout[c_name]
        assert ctypes.sizeof(mirror) == expected["size"], c_name
        for field, _ in mirror._fields_:
            assert [getattr(mirror, field).offset, getattr(mirror, field).size] == expected[field], f"{c_name}.{field}"


def test_every_field_of_the_headers_structs_is_mirrored():
    # A field added to c_api.h must be added to the mirror too (the offsets test above cannot see it).
    # c_api.h and the headers it includes (c_api_values.h).
    header = "\n".join(p.read_text() for p in sorted((REPO / "include" / "flopmeter").glob("c_api*.h")))
    for c_name, mirror in _native.structs_with_counts().items():
        start = header.index(f"typedef struct {c_name} {{")
        body = header[start:header.index(f"}} {c_name};", start)]
        code = re.sub(r"/\*.*?\*/", "", body[body.index("{") + 1:], flags=re.DOTALL)
        names = []
        for decl in (d.strip() for d in code.split(";") if d.strip()):
            if "(*" in decl:  # a function pointer: int (*wait)(...)
                names.append(decl.split("(*")[1].split(")")[0])
                continue
            # "int64_t t, h, w" declares three fields.
            parts = decl.split(",")
            names.append(parts[0].split()[-1].lstrip("*").split("[")[0])
            names += [p.strip().lstrip("*").split("[")[0] for p in parts[1:]]
        assert names == [f for f, _ in mirror._fields_], c_name
        assert len(names) >= 3  # the parse found the fields


def test_every_function_the_package_calls_is_exported():
    lib = _native.lib()
    for name in _native._SIGNATURES:
        assert hasattr(lib, name), name
    assert lib.flopmeter_abi_version() == 2
