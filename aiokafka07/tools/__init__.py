"""The console tools behind ``aiokafka07 <command>``: one module per command.

Each module provides ``configure(parser)`` and ``run(args)``; :mod:`aiokafka07.cli`
dispatches to them and supplies the behaviour they share (``--debug``, one-line errors,
Ctrl-C handling). :mod:`.common` holds their shared helpers, :mod:`.perf` what the
performance commands share, :mod:`.formatters` consume's message formatters, and
:mod:`.offset_files` the offsets files.
"""
