"""scripts/abi_list.py's version rules (the ctest `abi_list` applies them to the real library): what a change
to the public surface demands of the version number."""

from __future__ import annotations

import importlib.util

from conftest import REPO

spec = importlib.util.spec_from_file_location("abi_list", REPO / "scripts" / "abi_list.py")
abi_list = importlib.util.module_from_spec(spec)
spec.loader.exec_module(abi_list)

BASE = ["c-symbol flopmeter_create", "c-struct flopmeter_log 16 struct_size@0+4 step@8+8",
        "cxx-size flopmeter::log_event 72"]


def test_an_unchanged_surface_needs_no_bump():
    assert abi_list.compatibility(BASE, list(BASE)) == ("same", [])
    assert abi_list.bump_allows("0.3.0", "0.3.0", "same")


def test_additions_need_a_minor_version_or_a_patch_version_below_1():
    added = BASE + ["c-symbol flopmeter_model_load"]
    assert abi_list.compatibility(BASE, added)[0] == "added"
    assert not abi_list.bump_allows("1.2.0", "1.2.1", "added")
    assert abi_list.bump_allows("1.2.0", "1.3.0", "added")
    assert abi_list.bump_allows("0.2.0", "0.2.1", "added")
    assert not abi_list.bump_allows("0.2.0", "0.2.0", "added")


def test_a_field_appended_at_a_structs_end_is_an_addition():
    appended = [BASE[0], "c-struct flopmeter_log 24 struct_size@0+4 step@8+8 reserved@16+8", BASE[2]]
    assert abi_list.compatibility(BASE, appended)[0] == "added"


def test_removals_and_moved_fields_need_a_major_version_or_a_minor_version_below_1():
    removed = BASE[1:]
    moved = [BASE[0], "c-struct flopmeter_log 16 struct_size@0+4 step@4+8", BASE[2]]
    resized = [BASE[0], BASE[1], "cxx-size flopmeter::log_event 80"]
    for surface in (removed, moved, resized):
        change, problems = abi_list.compatibility(BASE, surface)
        assert change == "changed" and problems
        assert not abi_list.bump_allows("1.2.0", "1.3.0", change)
        assert abi_list.bump_allows("1.2.0", "2.0.0", change)
        assert abi_list.bump_allows("0.2.0", "0.3.0", change)
        assert not abi_list.bump_allows("0.2.0", "0.2.1", change)
