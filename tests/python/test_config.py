"""Configuration given in code (Meter keywords and dict tables) goes to the library's typed builder
(flopmeter_config_set_*): every error names the key path and the value the caller wrote, never a line and
column of text it did not write; a plugin file's errors keep their file:line:col; the library, not Python,
tells which collectives a configuration asks for."""

from __future__ import annotations

import re

import pytest

import flopmeter
from flopmeter import _config

QUIET = {"console": False}

# (Meter keywords, the message's start: the key path, then the problem with the value as written). The bounds
# and names are plugin_configs/SCHEMA.md's.
KEYWORD_ERRORS = [
    (dict(parallel={"tp": 0}), "key 'parallel.tp': must be > 0 (got 0)"),
    (dict(parallel={"cp": -2}), "key 'parallel.cp': must be > 0 (got -2)"),
    (dict(parallel={"pp": 2**21}), "key 'parallel.pp': too large: must be <= 2^20 = 1048576 (got 2097152)"),
    (dict(parallel={"tp": 2.5}), "key 'parallel.tp': expected an integer, got floating-point 2.5"),
    (dict(parallel={"tp": "2"}), "key 'parallel.tp': expected an integer, got string \"2\""),
    (dict(parallel={"tp": float("inf")}), "key 'parallel.tp': must be finite (got inf)"),
    (dict(parallel={"tp": [1]}), "key 'parallel.tp': the plugin config's lists hold strings, got [1]"),
    (dict(parallel={"tp": None}), "key 'parallel.tp': a NoneType is not a value of the plugin config"),
    (dict(parallel={"order": "tp-zz"}), "key 'parallel.order': order \"tp-zz\""),
    (dict(parallel=3), "key 'parallel': must be a table (a dict), got int 3"),
    (dict(peak={"tflops_per_gpu": -1}), "key 'peak.tflops_per_gpu': must be >= 0.001 (got -1)"),
    (dict(peak={"precision": "fp16"}), "key 'peak.precision': unknown precision 'fp16'"),
    (dict(logging={"topk": -1}), "key 'logging.topk': must be >= 0 (got -1)"),
    (dict(logging={"tpi_multiplier": 0}), "key 'logging.tpi_multiplier': must be >= 1 (got 0)"),
    (dict(logging={"emit": "some"}), "key 'logging.emit': unknown emit mode 'some'"),
    (dict(logging={"rendezvous_timeout_ms": 0}), "key 'logging.rendezvous_timeout_ms': must be > 0 (got 0)"),
    (dict(logging={"topk_interval_logs": 2**64}),
     "key 'logging.topk_interval_logs': 18446744073709551616 is outside the 64-bit integer range"),
    (dict(sinks={"console": "no"}), "key 'sinks.console': expected a boolean, got string \"no\""),
    (dict(sinks={"jsonl": 5}), "key 'sinks.jsonl': expected a string, got integer 5"),
    (dict(training={"lora_rank": -1}), "key 'training.lora_rank': must be >= 0 (got -1)"),
    (dict(training={"frozen": ["vision", "vision"]}), "key 'training.frozen[1]': part 'vision' is named twice"),
    (dict(training={"lora_targets": ["x_proj"]}), "key 'training.lora_targets[0]': unknown LoRA target 'x_proj'"),
    (dict(frozen="wings"), "key 'training.frozen[0]': unknown part 'wings'"),
    (dict(scope="all"), "key 'model.scope': unknown FLOP scope 'all'"),
    (dict(model={"config": "tiny_vlm", "sanity_check": "yes"}),
     "key 'model.sanity_check': expected a boolean, got string \"yes\""),
    (dict(model="nowhere.toml"), "key 'model.config': nowhere.toml: no such model file"),
    (dict(parallel={"tpp": 2}), "unknown key 'parallel.tpp' (did you mean 'parallel.tp'?)"),
]


@pytest.mark.parametrize("kwargs, message", KEYWORD_ERRORS, ids=[m.split(":")[0] for _, m in KEYWORD_ERRORS])
def test_every_keyword_error_names_the_key_path_and_the_value(kwargs, message):
    kwargs = dict(kwargs)
    kwargs.setdefault("model", "tiny_vlm")
    kwargs.setdefault("sinks", QUIET)
    with pytest.raises(flopmeter.ConfigError) as info:
        flopmeter.Meter(**kwargs)
    text = str(info.value)
    assert text.startswith(message), text
    assert not re.search(r":\d+:\d+: ", text), text  # no line and column of generated text
    assert "Meter(...)" not in text


def test_the_same_key_in_a_dict_config_gets_the_same_message():
    with pytest.raises(flopmeter.ConfigError, match=r"^key 'logging\.topk': must be >= 0 \(got -1\)$"):
        flopmeter.Meter({"model": {"config": "tiny_vlm"}, "logging": {"topk": -1}, "sinks": QUIET})


def test_a_plugin_files_error_keeps_its_line_and_column(tmp_path):
    plugin = tmp_path / "plugin.toml"
    plugin.write_text('[model]\nconfig = "tiny_vlm"\n\n[parallel]\ntp = 0\n')
    # tp = 0 is on line 5; its value starts at column 6.
    with pytest.raises(flopmeter.ConfigError, match="^" + re.escape(f"{plugin}:5:6: key 'parallel.tp': must be > 0 "
                                                                    "(got 0)")):
        flopmeter.Meter(plugin)


def test_the_library_says_which_collectives_a_configuration_asks_for(tmp_path):
    # A file's [logging] small_allreduce through the library (any Python version: no tomllib).
    plugin = tmp_path / "plugin.toml"
    plugin.write_text('[model]\nconfig = "tiny_vlm"\n[logging]\nsmall_allreduce = "backend"\n')
    with _config.Config(path=str(plugin)) as made:
        assert made.small_allreduce() == "backend"
    with _config.Config({"logging": {"small_allreduce": "log_depth"}}) as made:
        assert made.small_allreduce() == "log_depth"
    with _config.Config({}) as made:
        assert made.small_allreduce() == "automatic"
    # A name the library does not know: "automatic" until create reports it at its key.
    with _config.Config({"logging": {"small_allreduce": "ring"}}) as made:
        assert made.small_allreduce() == "automatic"
