"""Console tools: ``aiokafka07 <command>`` (also ``python -m aiokafka07 <command>``).

A thin dispatcher. :data:`COMMANDS` maps each command to the module implementing it,
imported only when that command runs (so ``aiokafka07 --help`` and every command start
fast). A command module provides:

``configure(parser)``
    add its arguments (and description) to an :class:`argparse.ArgumentParser`;
``run(args) -> int``
    do the work and return the exit status; a coroutine function runs under
    :func:`asyncio.run`;
``LOG_LEVEL`` (optional)
    its default logging level (WARNING when absent).

What every command gets from here: ``--debug`` (tracebacks and DEBUG logs, before or after
the command name); ``--verbose`` (the library's warnings about retries and reconnections,
otherwise kept quiet so that a failure reads as one line); errors as one line
``aiokafka07 <command>: error: ...`` with exit status 1 (2 for bad arguments, from
argparse); aiozk's connection noise silenced; and Ctrl-C / SIGTERM turned into a
cancellation of the running command, so its clean-up (flush, commit, leave the group)
runs. A command that treats being stopped as its normal end catches the cancellation and
returns 0; otherwise the status is 128 + the signal number (130 for Ctrl-C). A second
Ctrl-C during the clean-up exits at once.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import logging
import os
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

__all__ = ["COMMANDS", "SUBCOMMANDS", "command_names", "command_parser", "main", "top_parser"]

#: Command name → (module, one-line help). Adding a command is adding a line here.
COMMANDS: dict[str, tuple[str, str]] = {
    "produce": ("aiokafka07.tools.produce", "send lines or length-prefixed records to a topic"),
    "consume": ("aiokafka07.tools.consume", "print messages, as a group member or by partition"),
    "offsets": ("aiokafka07.tools.offsets", "offsets before a time for each partition of a topic"),
    "groups": ("aiokafka07.tools.groups", "list consumer groups; describe owners, offsets, lag"),
    "exporter": (
        "aiokafka07.tools.exporter",
        "Prometheus metrics and lag status of a cluster, over HTTP",
    ),
    "export-offsets": ("aiokafka07.tools.export_offsets", "save a group's offsets as JSON"),
    "import-offsets": ("aiokafka07.tools.import_offsets", "set a group's offsets from a file"),
    "update-offsets": (
        "aiokafka07.tools.update_offsets",
        "move a group's offsets of a topic to the earliest or latest",
    ),
    "verify-rebalance": (
        "aiokafka07.tools.verify_rebalance",
        "check every partition is owned by the right live member",
    ),
    "mirror": ("aiokafka07.tools.mirror", "copy topics to another cluster, compressed sets kept"),
    "bridge": (
        "aiokafka07.tools.bridge",
        "copy topics into a modern Kafka cluster (aiokafka), exactly once",
    ),
    "replay-log": (
        "aiokafka07.tools.replay_log",
        "send a topic's messages again, to another topic",
    ),
    "producer-perf": ("aiokafka07.tools.producer_perf", "producer throughput, in 0.7.2's columns"),
    "consumer-perf": (
        "aiokafka07.tools.consumer_perf",
        "group consumer throughput, 0.7.2's columns",
    ),
    "simple-consumer-perf": (
        "aiokafka07.tools.simple_consumer_perf",
        "one partition's fetch throughput, 0.7.2's columns",
    ),
    "dump-log": ("aiokafka07.tools.dump_log", "decode and check 0.7 log segment files"),
    "broker": ("aiokafka07.tools.broker", "run an embedded Kafka 0.7.2-compatible broker"),
    "cluster": ("aiokafka07.tools.cluster", "a local ZooKeeper and brokers for development"),
    "demo": ("aiokafka07.demo", "a whole pipeline, Spark included, on a throw-away cluster"),
}

#: Command → subcommand → (module, one-line help): ``aiokafka07 bridge offsets`` runs
#: the subcommand's module; the command without one of these words runs its own.
SUBCOMMANDS: dict[str, dict[str, tuple[str, str]]] = {
    "bridge": {
        "offsets": (
            "aiokafka07.tools.bridge_offsets",
            "move a 0.7 group's committed offsets to the bridge's target cluster",
        ),
    },
}

PROG = "aiokafka07"


def command_names() -> list[str]:
    """Every command and subcommand (``"bridge offsets"``), as :func:`command_parser`
    takes them."""
    names = []
    for command in COMMANDS:
        names.append(command)
        names.extend(f"{command} {sub}" for sub in SUBCOMMANDS.get(command, {}))
    return names


def _entry(name: str) -> tuple[str, str]:
    """The module and help of a command or subcommand (``"bridge offsets"``)."""
    command, _, sub = name.partition(" ")
    return SUBCOMMANDS[command][sub] if sub else COMMANDS[command]


def top_parser() -> argparse.ArgumentParser:
    """The parser of ``aiokafka07`` itself (its ``--help`` lists the commands)."""
    names = command_names()
    width = max(map(len, names)) + 2
    listing = "\n".join(f"  {name:<{width}}{_entry(name)[1]}" for name in names)
    parser = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} [--debug] COMMAND [ARGS...]",
        description="Tools for Apache Kafka 0.7 clusters.",
        epilog=f"commands:\n{listing}\n\n'{PROG} COMMAND --help' describes a command.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    parser.add_argument("command", metavar="COMMAND", choices=list(COMMANDS), help="see below")
    return parser


def _version() -> str:
    from . import __version__

    return __version__


class _Formatter(logging.Formatter):
    """``aiokafka07 consume: warning: ...``: log lines that look like the tool's own."""

    def __init__(self, command: str) -> None:
        super().__init__()
        self.command = command

    def format(self, record: logging.LogRecord) -> str:
        return f"{PROG} {self.command}: {record.levelname.lower()}: {record.getMessage()}"


def _configure_logging(command: str, debug: bool, verbose: bool, level: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if debug or level <= logging.INFO:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(_Formatter(command))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else level)
    if not (debug or verbose) and level > logging.INFO:
        # The library warns about every retry; the tool reports the outcome itself.
        logging.getLogger("aiokafka07").setLevel(logging.ERROR)
        logging.getLogger("aiokafka07.tools").setLevel(level)
    if not debug:
        # aiozk logs tracebacks for every failed connection attempt; our ZooKeeper layer
        # reports connection trouble and expiry in one line of its own.
        logging.getLogger("aiozk").setLevel(logging.CRITICAL)
    if not (debug or verbose):
        # aiokafka (the bridge's target client) logs every failed connection attempt at
        # ERROR; the bridge reports the outcome in one line of its own.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console tools; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # Options before the command belong to aiokafka07 itself, the rest to the command.
    split = next((i for i, arg in enumerate(argv) if not arg.startswith("-")), len(argv))
    top = top_parser().parse_args(argv[: split + 1])
    name: str = top.command
    # A subcommand is the word right after its command (``bridge offsets --group G``).
    if split + 1 < len(argv) and argv[split + 1] in SUBCOMMANDS.get(name, {}):
        name = f"{name} {argv[split + 1]}"
        split += 1
    module: Any = importlib.import_module(_entry(name)[0])
    parser = command_parser(name)
    # Intermixed: positionals may follow options (``produce TOPIC --zookeeper ZK FILE``);
    # plain parse_args would give the optional FILE to nobody and refuse it.
    args = parser.parse_intermixed_args(argv[split + 1 :])
    args.debug = args.debug or top.debug
    args.command = name
    level = getattr(module, "LOG_LEVEL", logging.WARNING)
    _configure_logging(name, args.debug, args.verbose, level)
    from .tools.common import DEPRECATIONS

    for warning in getattr(args, DEPRECATIONS, None) or ():
        logging.getLogger("aiokafka07.tools").warning(warning)
    return _run(name, module.run, args, parser)


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser of ``aiokafka07 <name>`` as the command runs it: the options every
    command has, then the command module's own. The documentation renders each
    command's ``--help`` from here, so the two cannot drift apart. ``name`` may be a
    subcommand: ``"bridge offsets"``."""
    module_name, help_ = _entry(name)
    module: Any = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"{PROG} {name}", description=help_)
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show the library's warnings (retries)"
    )
    module.configure(parser)
    return parser


def _run(
    name: str,
    run: Callable[[argparse.Namespace], Any],
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
) -> int:
    from .tools.common import UsageError

    try:
        if inspect.iscoroutinefunction(run):
            return asyncio.run(_supervise(name, run, args))
        return int(run(args))
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        print(f"{PROG} {name}: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except BrokenPipeError:
        # The reader of our output went away (``| head``): a normal way to stop.
        from .tools.common import silence_stdout

        silence_stdout()
        return 0
    except Exception as exc:
        if args.debug:
            traceback.print_exc()
        print(f"{PROG} {name}: error: {_describe(exc)}", file=sys.stderr, flush=True)
        return 1


def _describe(exc: BaseException) -> str:
    """One line for an error: its message, or for an unexpected kind its type too."""
    from .errors import KafkaError
    from .tools.common import CommandError

    text = " ".join(str(exc).split()).rstrip(" :") or type(exc).__name__
    if isinstance(exc, (CommandError, KafkaError, ValueError, OSError, TimeoutError)):
        return text
    return f"unexpected {type(exc).__name__}: {text} (--debug shows the traceback)"


#: How the cancellation that stops a command names its signal (the command may say it:
#: :func:`aiokafka07.tools.common.stop_reason`).
_STOPPED_BY = {signal.SIGINT: "stopped by Ctrl-C", signal.SIGTERM: "stopped by SIGTERM"}


async def _supervise(
    name: str, run: Callable[[argparse.Namespace], Awaitable[int]], args: argparse.Namespace
) -> int:
    """Run a command; the first Ctrl-C / SIGTERM cancels it, a second one exits at once."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    received: list[int] = []

    def on_signal(signum: int) -> None:
        if received:
            print(f"{PROG} {name}: stopped again: exiting without clean-up", file=sys.stderr)
            sys.stderr.flush()
            os._exit(128 + signum)
        received.append(signum)
        task.cancel(_STOPPED_BY[signal.Signals(signum)])  # what stopped it, for the command

    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return int(await run(args))
    except asyncio.CancelledError:
        if received:
            return 128 + received[0]
        raise
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
