"""The C ABI of libflopmeter (``flopmeter/c_api.h``), mirrored with ctypes.

Everything the package does goes through these mirrors: ``FlopModel`` through the ``flopmeter_model_*``
functions, ``Meter`` through the plugin functions. The library loaded is the one built into the package,
without LibTorch, so it coexists with whatever torch the trainer imports (or none). ``FLOPMETER_LIBRARY``
names another ``libflopmeter.so`` (a build tree's, for development).

The Structure classes below must match the C header field for field: ``tests/python/test_abi_layout.py``
compiles a C program against ``c_api.h`` and compares every ``sizeof`` and ``offsetof`` with them.
Thread-safety: the loaded library is process-wide and its functions may be called from any thread.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from pathlib import Path
from typing import Optional

PACKAGE_DIR = Path(__file__).resolve().parent
# The shipped configs, where the wheel installs them (beside the CLI's ../share/flopmeter, so that the
# bundled `flopmeter` executable finds them too).
SHARE_DIR = PACKAGE_DIR / "share" / "flopmeter"

OK = 0
E_NULL_ARGUMENT = -1
E_STRUCT_SIZE = -2
E_REJECTED = -3
E_INVALID_HANDLE = -4
E_AFTER_FLUSH = -5
E_REENTRANT = -6

SCOPE_COMPLETE = 0
SCOPE_SEED = 1

LOG_LEARNING_RATE = 0x1
LOG_GRAD_NORM = 0x2
LOG_DATA_TIME = 0x4
LOG_FORWARD_BACKWARD_TIME = 0x8
LOG_PEAK_MEMORY = 0x10
LOG_PEAK_RESERVED_MEMORY = 0x20

ERROR_BUFFER_BYTES = 4096
# A refused micro-batch's reason (flopmeter_on_microbatch_ex): the counting's messages name an argument, an
# index and a value or two, far below this; a longer one is cut (NUL-terminated) by the library.
WHY_BUFFER_BYTES = 512
SMALL_ALLREDUCE_NAMES = {0: "automatic", 1: "backend", 2: "log_depth"}  # FLOPMETER_SMALL_ALLREDUCE_*

c_int64_p = ctypes.POINTER(ctypes.c_int64)
c_int32_p = ctypes.POINTER(ctypes.c_int32)


class Grid(ctypes.Structure):
    _fields_ = [("t", ctypes.c_int64), ("h", ctypes.c_int64), ("w", ctypes.c_int64)]


class Microbatch(ctypes.Structure):
    # The array pointers are void* here (same size and offset as the header's typed pointers): an address
    # from a tensor or an array is assigned as an int, without a ctypes.cast on the micro-batch path.
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("document_lengths", ctypes.c_void_p),
        ("num_document_lengths", ctypes.c_size_t),
        ("cu_seqlens", ctypes.c_void_p),
        ("num_cu_seqlens", ctypes.c_size_t),
        ("positions", ctypes.c_void_p),
        ("num_positions", ctypes.c_size_t),
        ("padding_tokens", ctypes.c_int64),
        ("grids", ctypes.c_void_p),
        ("num_grids", ctypes.c_size_t),
        ("samples", ctypes.c_int64),
        ("has_loss", ctypes.c_int),
        ("loss_sum", ctypes.c_double),
        ("label_tokens", ctypes.c_int64),
        ("positions_int32", ctypes.c_void_p),
        ("num_positions_int32", ctypes.c_size_t),
    ]


class Log(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("set_fields", ctypes.c_uint32),
        ("step", ctypes.c_int64),
        ("learning_rate", ctypes.c_double),
        ("grad_norm", ctypes.c_double),
        ("data_time_seconds", ctypes.c_double),
        ("forward_backward_time_seconds", ctypes.c_double),
        ("peak_memory_bytes", ctypes.c_int64),
        ("peak_reserved_memory_bytes", ctypes.c_int64),
    ]


START_ALLREDUCE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_double), ctypes.c_size_t)
WAIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


# flopmeter/c_api_collectives.h: one collective the library asks flopmeter_comm.start for.
COLLECTIVE_SUM_MAX = 0
COLLECTIVE_ALLGATHER = 1


class Collective(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("kind", ctypes.c_int32),
        ("values", ctypes.POINTER(ctypes.c_double)),
        ("count", ctypes.c_size_t),
        ("sum_count", ctypes.c_size_t),
        ("send", ctypes.POINTER(ctypes.c_double)),
    ]


START_COLLECTIVE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(Collective))


class Comm(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("rank", ctypes.c_int),
        ("world_size", ctypes.c_int),
        ("user", ctypes.c_void_p),
        ("start_allreduce_sum", START_ALLREDUCE),
        ("wait", WAIT),
        ("release", RELEASE),
        ("start_allreduce_max", START_ALLREDUCE),  # 0.3: the MAX of an ordinary log
        ("start", START_COLLECTIVE),  # 0.3: every collective as one call
    ]


class GlooOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("port_offset", ctypes.c_int),
        ("rendezvous_timeout_ms", ctypes.c_int64),
    ]


HEALTH_FIELDS = (
    "bad_microbatches",
    "failed_collectives",
    "skipped_intervals",
    "events_after_flush",
    "collectives_started",
    "rejected_logs",
    "out_of_step_intervals",
    "dropped_records",
    "reentrant_calls",
    "config_mismatch_intervals",
)


class HealthCounters(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32)] + [(name, ctypes.c_uint64) for name in HEALTH_FIELDS]


# The counts are not listed here: the library names them (flopmeter_count_field, in its one count table's order)
# and the loaded library decides them. COUNT_FIELDS (flopmeter_counts' fields), ROW_COUNT_FIELDS (the per-log
# row's counts: those, then the itemless ones) and the Counts mirror are set when the library is loaded, on
# first use of any of them (module __getattr__ below).
def _count_table(loaded: ctypes.CDLL):
    """[(name, in flopmeter_counts)] in the library's table order."""
    function = loaded.flopmeter_count_field
    function.restype = ctypes.c_char_p
    function.argtypes = [ctypes.c_uint32, ctypes.POINTER(ctypes.c_int)]
    table = []
    in_struct = ctypes.c_int(0)
    while True:
        name = function(len(table), ctypes.byref(in_struct))
        if name is None:
            return table
        table.append((name.decode("ascii"), bool(in_struct.value)))


def _set_count_mirrors(table) -> type:
    global COUNT_FIELDS, ROW_COUNT_FIELDS, Counts
    COUNT_FIELDS = tuple(name for name, in_struct in table if in_struct)
    ROW_COUNT_FIELDS = tuple(name for name, _ in table)
    Counts = type("Counts", (ctypes.Structure,),
                  {"_fields_": [("struct_size", ctypes.c_uint32)] + [(n, ctypes.c_int64) for n in COUNT_FIELDS]})
    STRUCTS["flopmeter_counts"] = Counts
    return Counts


def __getattr__(name: str):
    if name in ("COUNT_FIELDS", "ROW_COUNT_FIELDS", "Counts"):
        lib()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


FLOP_TERMS = ("text_dense", "text_attention", "vision_dense", "vision_attention", "patch_embed", "merger", "mtp")


class Flops(ctypes.Structure):
    _fields_ = (
        [("struct_size", ctypes.c_uint32), ("total", ctypes.c_double)]
        + [(name, ctypes.c_double) for name in FLOP_TERMS]
        + [("exact_total", ctypes.c_char * 48)]
    )


class ModelOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("vision_frozen", ctypes.c_int),
        ("merger_frozen", ctypes.c_int),
        ("text_frozen", ctypes.c_int),
        ("lora_rank", ctypes.c_int64),
        ("lora_targets", ctypes.POINTER(ctypes.c_char_p)),
        ("num_lora_targets", ctypes.c_size_t),
        ("recompute_policy", ctypes.c_char_p),
        ("recompute_layers", ctypes.c_int64),
        ("recompute_every", ctypes.c_int64),
        ("recompute_pipeline_stages", ctypes.c_int64),
        ("recompute_vision", ctypes.c_int),
    ]


# flopmeter/c_api_values.h: a record as values, and a model report's values (_values.py reads them).
class Record(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("step", ctypes.c_int64),
        ("num_values", ctypes.c_size_t),
        ("names", ctypes.POINTER(ctypes.c_uint32)),
        ("values", ctypes.POINTER(ctypes.c_double)),
        ("name_table", ctypes.POINTER(ctypes.c_char_p)),
        ("num_names", ctypes.c_size_t),
    ]


class ReportValue(ctypes.Structure):
    _fields_ = [("integer", ctypes.c_int64), ("number", ctypes.c_double), ("text", ctypes.c_char_p)]


RECORD_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(Record))

MAX_WORLD_SIZE = 1048576  # FLOPMETER_MAX_WORLD_SIZE


# flopmeter/c_api_collectives.h: one round of a log-depth schedule (_log_depth.py executes them).
class LogDepthStep(ctypes.Structure):
    _fields_ = [
        ("peer", ctypes.c_int32),
        ("combine", ctypes.c_int32),
        ("send_begin", ctypes.c_uint64),
        ("send_end", ctypes.c_uint64),
        ("receive_begin", ctypes.c_uint64),
        ("receive_end", ctypes.c_uint64),
    ]


# Every mirrored struct, by its C name: what the layout test compares.
STRUCTS = {
    "flopmeter_grid": Grid,
    "flopmeter_microbatch": Microbatch,
    "flopmeter_log": Log,
    "flopmeter_comm": Comm,
    "flopmeter_gloo_options": GlooOptions,
    "flopmeter_health_counters": HealthCounters,
    "flopmeter_flops": Flops,
    "flopmeter_model_options": ModelOptions,
    "flopmeter_record": Record,
    "flopmeter_report_value": ReportValue,
    "flopmeter_log_depth_step": LogDepthStep,
    "flopmeter_collective": Collective,
}  # and "flopmeter_counts": Counts, added once the library is loaded (structs_with_counts() has all)


def structs_with_counts():
    """STRUCTS with the Counts mirror, which the loaded library's count table decides."""
    lib()
    return STRUCTS

# flopmeter_log_callback: (user, level, message).
LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)

_P = ctypes.c_void_p
_COUNTS_P = "POINTER(Counts)"  # the Counts mirror is built when the library is loaded
_SIGNATURES = {
    "flopmeter_abi_version": (ctypes.c_uint32, []),
    "flopmeter_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "flopmeter_set_log_callback": (ctypes.c_int, [LOG_CALLBACK, ctypes.c_void_p, ctypes.c_int]),
    "flopmeter_create": (_P, [ctypes.c_char_p, ctypes.POINTER(Comm), ctypes.c_char_p, ctypes.c_size_t]),
    # The typed configuration builder (c_api_config.h): _config.py sets Meter's keys through it.
    "flopmeter_config_new": (_P, []),
    "flopmeter_config_destroy": (None, [_P]),
    "flopmeter_config_load_file": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    "flopmeter_config_set_int": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p,
                                                ctypes.c_size_t]),
    "flopmeter_config_set_double": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_double, ctypes.c_char_p,
                                                   ctypes.c_size_t]),
    "flopmeter_config_set_bool": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                                 ctypes.c_size_t]),
    "flopmeter_config_set_string": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                                   ctypes.c_size_t]),
    "flopmeter_config_set_string_list": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p),
                                                        ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]),
    "flopmeter_config_small_allreduce": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p,
                                                        ctypes.c_size_t]),
    "flopmeter_create_from_config": (_P, [_P, ctypes.POINTER(Comm), ctypes.c_char_p, ctypes.c_size_t]),
    "flopmeter_on_microbatch": (ctypes.c_int, [_P, ctypes.POINTER(Microbatch)]),
    "flopmeter_on_microbatch_ex": (ctypes.c_int, [_P, ctypes.POINTER(Microbatch), ctypes.c_char_p, ctypes.c_size_t]),
    "flopmeter_on_log": (ctypes.c_int, [_P, ctypes.POINTER(Log)]),
    "flopmeter_flush": (ctypes.c_int, [_P]),
    "flopmeter_destroy": (ctypes.c_int, [_P]),
    "flopmeter_health": (ctypes.c_int, [_P, ctypes.POINTER(HealthCounters)]),
    "flopmeter_plugin_model": (_P, [_P, ctypes.c_char_p, ctypes.c_size_t]),
    "flopmeter_model_load": (_P, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    "flopmeter_model_parse_json": (_P, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p,
                                        ctypes.c_size_t]),
    "flopmeter_model_with_options": (_P, [_P, ctypes.POINTER(ModelOptions), ctypes.c_char_p, ctypes.c_size_t]),
    "flopmeter_model_destroy": (ctypes.c_int, [_P]),
    "flopmeter_count_field": (ctypes.c_char_p, [ctypes.c_uint32, ctypes.POINTER(ctypes.c_int)]),
    "flopmeter_model_window": (ctypes.c_int, [_P, ctypes.c_uint32, ctypes.POINTER(ctypes.c_int),
                                              ctypes.POINTER(ctypes.c_int64)]),
    "flopmeter_model_count": (ctypes.c_int, [_P, ctypes.POINTER(Microbatch), _COUNTS_P, ctypes.c_char_p,
                                             ctypes.c_size_t]),
    "flopmeter_model_flops": (ctypes.c_int, [_P, _COUNTS_P, ctypes.c_int, ctypes.POINTER(Flops)]),
    "flopmeter_set_record_callback": (ctypes.c_int, [_P, RECORD_CALLBACK, _P]),
    "flopmeter_model_report_key": (ctypes.c_char_p, [_P, ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(ctypes.c_int)]),
    "flopmeter_model_coefficients": (ctypes.c_int64, [_P, ctypes.POINTER(ReportValue), ctypes.c_size_t]),
    "flopmeter_model_estimate": (ctypes.c_int64, [_P, _COUNTS_P, ctypes.c_int, ctypes.c_int64,
                                                  ctypes.POINTER(ReportValue), ctypes.c_size_t]),
    "flopmeter_log_depth_schedule": (ctypes.c_int64, [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_size_t,
                                                      ctypes.POINTER(LogDepthStep), ctypes.c_size_t]),
    "flopmeter_log_depth_min_ranks": (ctypes.c_int, []),
    "flopmeter_model_check_json": (ctypes.c_int64, [_P, ctypes.c_int64, ctypes.c_char_p, ctypes.c_size_t,
                                                    ctypes.c_char_p, ctypes.c_size_t]),
}

LOG_LEVEL_WARN = 3  # FLOPMETER_LOG_LEVEL_WARN: warnings and errors go to logging, the console sink's records to stderr
_PYTHON_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR,
                  5: logging.CRITICAL}


def _forward_log(user: object, level: int, message: bytes) -> None:
    """The library's warnings (rate-limited ones included) and errors, as records of the "flopmeter" logger."""
    try:
        logging.getLogger("flopmeter").log(_PYTHON_LEVELS.get(level, logging.WARNING),
                                           message.decode("utf-8", "replace"))
    except Exception:  # noqa: BLE001 - nothing may cross into C
        pass


_log_callback = LOG_CALLBACK(_forward_log)  # alive as long as the module: the library keeps calling it

_lock = threading.Lock()
_library: Optional[ctypes.CDLL] = None


def library_path() -> Path:
    """The libflopmeter.so this package loads: $FLOPMETER_LIBRARY, else the one installed with it."""
    override = os.environ.get("FLOPMETER_LIBRARY")
    if override:
        return Path(override)
    for candidate in sorted((PACKAGE_DIR / "_lib").glob("libflopmeter.so*")):
        return candidate
    raise ImportError(
        f"flopmeter: no libflopmeter.so in {PACKAGE_DIR / '_lib'} (install the package with `pip install .` from "
        "the repository root, or set FLOPMETER_LIBRARY to a built libflopmeter.so)"
    )


def lib() -> ctypes.CDLL:
    """The loaded library, with every function's prototype set (loaded on first use)."""
    global _library
    if _library is not None:
        return _library
    with _lock:
        if _library is None:
            loaded = ctypes.CDLL(str(library_path()), mode=ctypes.RTLD_LOCAL)
            counts_p = ctypes.POINTER(_set_count_mirrors(_count_table(loaded)))
            for name, (restype, argtypes) in _SIGNATURES.items():
                function = getattr(loaded, name)
                function.restype = restype
                function.argtypes = [counts_p if a is _COUNTS_P else a for a in argtypes]
            loaded.flopmeter_set_log_callback(_log_callback, None, LOG_LEVEL_WARN)
            _library = loaded
    return _library


WINDOW_KINDS = {0: "sliding", 1: "chunked"}  # FLOPMETER_WINDOW_SLIDING, FLOPMETER_WINDOW_CHUNKED


def model_windows(handle) -> tuple:
    """A model's attention windows, (("sliding" | "chunked", size), ...), in window_pairs_<k> order."""
    windows = []
    kind, size = ctypes.c_int(0), ctypes.c_int64(0)
    while lib().flopmeter_model_window(handle, len(windows), ctypes.byref(kind), ctypes.byref(size)) == OK:
        windows.append((WINDOW_KINDS[kind.value], int(size.value)))
    return tuple(windows)


def error_buffer() -> ctypes.Array:
    return ctypes.create_string_buffer(ERROR_BUFFER_BYTES)


def status_string(code: int) -> str:
    return lib().flopmeter_status_string(code).decode("utf-8", "replace")


def sized(struct_type):
    """A zeroed struct with struct_size set, as every C ABI struct wants it."""
    value = struct_type()
    value.struct_size = ctypes.sizeof(struct_type)
    return value
