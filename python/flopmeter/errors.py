"""flopmeter's exception types."""

from __future__ import annotations


class ConfigError(ValueError):
    """A model or plugin configuration that flopmeter refuses.

    The message is the library's, as the ``flopmeter`` CLI prints it: ``file:line:col: key 'parallel.tp': ...``
    for a file, the same with the argument's name for a configuration given in code.
    """
