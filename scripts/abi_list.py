#!/usr/bin/env python3
"""The public surface of libflopmeter, listed, and held to semantic versioning against abi/abi-list.txt.

What is listed (for the library as built):
  c-symbol NAME                 every exported C function (nm -D: defined text symbols named flopmeter_*)
  c-struct NAME SIZE FIELD@OFFSET+SIZE ...
                                every struct of flopmeter/c_api.h and the C ABI headers it includes
                                (flopmeter/c_api_*.h), as a C compiler lays it out
  cxx-symbol SIGNATURE          every exported C++ symbol in namespace flopmeter (demangled)
  cxx-size NAME SIZE            sizeof every struct and class of the public C++ headers (flopmeter/*.h except
                                the LibTorch ones, c10d.h and torch.h)

abi/abi-list.txt holds one such list per version, newest last, under "[VERSION]" headings. --check (ctest
`abi_list`) fails when:
  - the list of the version in CMakeLists.txt's project(VERSION) is missing or differs from the library's:
    the surface changed and the list was not updated (run this script with --update);
  - CHANGELOG.md has no "## VERSION" section;
  - against the previous version's list, something was removed or changed (a symbol gone, a struct's field
    moved, resized or dropped, a C++ type's size changed) while the version is not a new major version (a new
    minor version while the major version is 0), or something was added while the version is not at least a
    new minor version (a new patch version while the major version is 0).
--update writes the library's list under the current version. It replaces an existing list only while
CHANGELOG.md calls that version "(unreleased)": once released, a version's list is fixed, and any change needs
a new version (and its CHANGELOG section) first.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def c_symbols(library: Path):
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], check=True, capture_output=True, text=True)
    return sorted({line.split()[-1] for line in out.stdout.splitlines()
                   if len(line.split()) == 3 and line.split()[1] == "T" and line.split()[2].startswith("flopmeter_")})


def cxx_symbols(library: Path):
    out = subprocess.run(["nm", "-DC", "--defined-only", str(library)], check=True, capture_output=True, text=True)
    names = set()
    for line in out.stdout.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[1] in ("T", "W", "V", "D", "B", "R") and parts[2].startswith("flopmeter::"):
            names.add(parts[2])
        elif len(parts) == 3 and parts[2].startswith(("vtable for flopmeter::", "typeinfo for flopmeter::")):
            names.add(parts[2])
    return sorted(names)


def struct_fields(header_text: str, name: str):
    start = header_text.index(f"typedef struct {name} {{")
    body = header_text[header_text.index("{", start) + 1:header_text.index(f"}} {name};", start)]
    code = re.sub(r"/\*.*?\*/", "", body, flags=re.DOTALL)
    fields = []
    for decl in (d.strip() for d in code.split(";") if d.strip()):
        if "(*" in decl:
            fields.append(decl.split("(*")[1].split(")")[0])
            continue
        parts = decl.split(",")
        fields.append(parts[0].split()[-1].lstrip("*").split("[")[0])
        fields += [p.strip().lstrip("*").split("[")[0] for p in parts[1:]]
    return fields


def compile_and_run(compiler: str, source: str, suffix: str, include_dirs, std: str):
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"layout{suffix}"
        src.write_text(source)
        exe = Path(tmp) / "layout"
        subprocess.run([compiler, std, *[f"-I{d}" for d in include_dirs], str(src), "-o", str(exe)], check=True)
        return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()


def c_structs(include_dirs, c_compiler: str):
    # c_api.h and the headers it includes (c_api_*.h): every struct of the C ABI.
    header = "\n".join(p.read_text() for p in sorted((ROOT / "include" / "flopmeter").glob("c_api*.h")))
    names = re.findall(r"typedef struct (flopmeter_\w+) \{", header)
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "flopmeter/c_api.h"', "int main(void) {"]
    for name in names:
        fields = struct_fields(header, name)
        fmt = " ".join(f"{f}@%zu+%zu" for f in fields)
        args = ", ".join(f"offsetof({name}, {f}), sizeof((({name}*)0)->{f})" for f in fields)
        lines.append(f'  printf("c-struct {name} %zu {fmt}\\n", sizeof({name}), {args});')
    lines += ["  return 0;", "}"]
    return compile_and_run(c_compiler, "\n".join(lines) + "\n", ".c", include_dirs, "-std=c99")


def cxx_sizes(include_dirs, cxx_compiler: str):
    headers = sorted(p.name for p in (ROOT / "include" / "flopmeter").glob("*.h")
                     if p.name not in ("c10d.h", "torch.h", "nccl.h") and not p.name.startswith("c_api"))
    types = []
    for h in headers:
        text = (ROOT / "include" / "flopmeter" / h).read_text()
        types += re.findall(r"^(?:struct|class) ([a-z_]+)(?: final)? (?:\{|:)", text, flags=re.MULTILINE)
    # array_view is a template: its size is that of one instantiation.
    types = sorted(set(t for t in types if t != "array_view")) + ["array_view<std::int64_t>"]
    lines = [f'#include "flopmeter/{h}"' for h in headers] + ["#include <cstdio>", "int main() {"]
    for t in types:
        lines.append(f'  std::printf("cxx-size flopmeter::{t} %zu\\n", sizeof(flopmeter::{t}));')
    lines += ["  return 0;", "}"]
    return compile_and_run(cxx_compiler, "\n".join(lines) + "\n", ".cpp", include_dirs, "-std=c++17")


def describe(args):
    include_dirs = [ROOT / "include", Path(args.generated_include)]
    entries = [f"c-symbol {s}" for s in c_symbols(Path(args.library))]
    entries += c_structs(include_dirs, args.c_compiler)
    entries += [f"cxx-symbol {s}" for s in cxx_symbols(Path(args.library))]
    entries += cxx_sizes(include_dirs, args.cxx_compiler)
    return entries


def read_lists(path: Path):
    lists, current = {}, None
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            m = re.fullmatch(r"\[(\d+\.\d+\.\d+)\]", line.strip())
            if m:
                current = m.group(1)
                lists[current] = []
            elif current is not None:
                lists[current].append(line)
    return lists


def write_lists(path: Path, lists):
    out = ["# The public surface of libflopmeter per version (scripts/abi_list.py; checked by ctest abi_list).",
           "# Generated: run `python3 scripts/abi_list.py --update ...` (the ctest prints the command); do not edit.",
           ""]
    for version in sorted(lists, key=lambda v: tuple(map(int, v.split(".")))):
        out.append(f"[{version}]")
        out += lists[version]
        out.append("")
    path.write_text("\n".join(out))


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(flopmeter VERSION (\d+\.\d+\.\d+)", text).group(1)


def changelog_status(changelog: Path, version: str):
    text = changelog.read_text()
    m = re.search(rf"^## {re.escape(version)}(.*)$", text, flags=re.MULTILINE)
    if not m:
        return None
    return "unreleased" if "unreleased" in m.group(1) else "released"


def keyed(entries):
    """entry kind + name -> the rest (what may change)."""
    out = {}
    for e in entries:
        kind, rest = e.split(" ", 1)
        name = rest if kind in ("c-symbol", "cxx-symbol") else rest.split(" ", 1)[0]
        out[(kind, name)] = rest
    return out


def compatibility(old, new):
    """'same', 'added' (only additions: new symbols, fields appended at a struct's end) or 'changed'."""
    a, b = keyed(old), keyed(new)
    if a == b:
        return "same", []
    problems = []
    for key, value in a.items():
        if key not in b:
            problems.append(f"removed: {key[0]} {key[1]}")
        elif value != b[key]:
            if key[0] == "c-struct":
                old_fields = value.split()[2:]
                new_fields = b[key].split()[2:]
                if new_fields[:len(old_fields)] == old_fields:
                    continue  # fields appended at the end: an addition under the struct_size rules
            problems.append(f"changed: {key[0]} {value}  ->  {b[key]}")
    return ("changed" if problems else "added"), problems


def bump_allows(previous: str, current: str, change: str) -> bool:
    p, c = tuple(map(int, previous.split("."))), tuple(map(int, current.split(".")))
    if change == "same":
        return True
    major_bump = c[0] > p[0]
    minor_bump = c[0] == p[0] and c[1] > p[1]
    patch_bump = c[:2] == p[:2] and c[2] > p[2]
    if change == "changed":
        return major_bump or (c[0] == 0 and minor_bump)
    return major_bump or minor_bump or (c[0] == 0 and patch_bump)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", required=True)
    parser.add_argument("--generated-include", required=True, help="the build's include dir (flopmeter/export.h)")
    parser.add_argument("--c-compiler", default="cc")
    parser.add_argument("--cxx-compiler", default="c++")
    parser.add_argument("--list", default=str(ROOT / "abi" / "abi-list.txt"))
    parser.add_argument("--version", help="record under this version instead of project(VERSION) (a past build)")
    parser.add_argument("--changelog", default=str(ROOT / "CHANGELOG.md"))
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true")
    action.add_argument("--update", action="store_true")
    args = parser.parse_args()

    version = args.version or project_version()
    current = describe(args)
    path = Path(args.list)
    lists = read_lists(path)
    status = changelog_status(Path(args.changelog), version)
    update_command = (f"python3 scripts/abi_list.py --update --library {args.library} --generated-include "
                      f"{args.generated_include}")
    if args.update:
        if status is None:
            sys.exit(f"abi_list: CHANGELOG.md has no '## {version}' section: write what changed first")
        if version in lists and lists[version] != current and status == "released":
            sys.exit(f"abi_list: {version} is released (CHANGELOG.md): its list is fixed. Bump project(VERSION) in "
                     "CMakeLists.txt and add a CHANGELOG.md section for the new version")
        lists[version] = current
        write_lists(path, lists)
        print(f"abi_list: wrote the list of {version} ({len(current)} entries) to {path}")
        return
    failures = []
    if status is None:
        failures.append(f"CHANGELOG.md has no '## {version}' section for the version in CMakeLists.txt")
    if version not in lists:
        failures.append(f"abi/abi-list.txt has no list for {version}; record it: {update_command}")
    elif lists[version] != current:
        old = set(lists[version])
        new = set(current)
        diff = [f"  - {e}" for e in sorted(old - new)] + [f"  + {e}" for e in sorted(new - old)]
        what = ("update the list" if status == "unreleased" else
                "bump project(VERSION) in CMakeLists.txt, add its CHANGELOG.md section, then update the list")
        failures.append(f"the public surface differs from the list of {version}:\n" + "\n".join(diff[:60]) +
                        f"\n{what}: {update_command}")
    older = [v for v in lists if tuple(map(int, v.split("."))) < tuple(map(int, version.split(".")))]
    if older and version in lists:
        previous = max(older, key=lambda v: tuple(map(int, v.split("."))))
        change, problems = compatibility(lists[previous], lists[version])
        if not bump_allows(previous, version, change):
            failures.append(f"{previous} -> {version} is not a large enough version step for what changed "
                            f"({change}):\n" + "\n".join(f"  {p}" for p in problems[:40]))
    if failures:
        sys.exit("abi_list: FAIL\n" + "\n".join(failures))
    print(f"abi_list: the surface of {version} matches its list ({len(current)} entries)")


if __name__ == "__main__":
    main()
