"""The console tools' dispatcher, and how every tool fails: as a user runs them, in real
processes. Also the helpers the other ``test_cli_*`` modules share."""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import os
import re
import signal
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from aiokafka07.cli import COMMANDS, SUBCOMMANDS, command_names, command_parser
from aiokafka07.testing.hostile import SilentBroker
from aiokafka07.tools.common import DEPRECATIONS

#: Short ZooKeeper connect timeout for unreachable-server cases (seconds).
ZK_TIMEOUT_MS = "500"


async def start_cli(*args: str, stdin: bool = False) -> asyncio.subprocess.Process:
    """``python -m aiokafka07 ARGS`` with piped stdout/stderr (and stdin if asked)."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aiokafka07", *args,
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def run_cli(
    *args: str, stdin: bytes | None = None, timeout: float = 60
) -> tuple[int, bytes, str]:
    """Run a tool to completion: (exit status, stdout bytes, stderr text)."""
    proc = await start_cli(*args, stdin=stdin is not None)
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    assert proc.returncode is not None
    return proc.returncode, out, err.decode()


async def stop_cli(
    proc: asyncio.subprocess.Process, sig: int = signal.SIGINT, timeout: float = 30
) -> tuple[int, bytes, str]:
    """Send ``sig`` and collect the rest of the output."""
    proc.send_signal(sig)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out, err.decode()


async def ok(*args: str, stdin: bytes | None = None) -> bytes:
    """Run a tool that must succeed; its stdout."""
    code, out, err = await run_cli(*args, stdin=stdin)
    assert code == 0, err
    assert "Traceback" not in err, err
    return out


def one_error_line(err: str, command: str) -> str:
    """The single stderr line of a failed tool, checked for the common shape."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"aiokafka07 {command}: error: "), err
    return lines[0]


def unused_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def fails(command: str, *args: str, status: int = 1, stdin: bytes | None = None) -> str:
    code, _, err = await run_cli(command, *args, stdin=stdin)
    assert code == status, err
    if status == 2:  # argparse: usage, then the error line
        assert err.strip().splitlines()[-1].startswith(f"aiokafka07 {command}: error: "), err
        assert "Traceback" not in err
        return err
    return one_error_line(err, command)


async def test_help_lists_every_command_and_each_command_has_help() -> None:
    code, out, _ = await run_cli("--help")
    assert code == 0
    for name in COMMANDS:
        assert re.search(rf"^\s+{name}\s", out.decode(), re.MULTILINE), name
    names = command_names()
    results = await asyncio.gather(*(run_cli(*name.split(), "--help") for name in names))
    for name, (code, out, err) in zip(names, results, strict=True):
        assert code == 0, err
        assert out.decode().startswith(f"usage: aiokafka07 {name}"), out
        # README: every command's help ends with its exit statuses.
        assert re.search(r"^exit status:\n(  \d+ +\S.*\n)+\Z", out.decode(), re.M), (name, out)


def _statuses_returned(module: object) -> set[int]:
    """The exit statuses a command's ``run`` returns, read from its source: int literals
    and module-level int constants in its own return statements (both branches of a
    conditional expression; every value of a module-level table of statuses indexed by
    the return; nested functions are not ``run``'s returns)."""
    function = ast.parse(textwrap.dedent(inspect.getsource(module.run))).body[0]  # type: ignore[attr-defined]
    constants = vars(module)

    def values(node: ast.expr) -> set[int]:
        if isinstance(node, ast.IfExp):
            return values(node.body) | values(node.orelse)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return {node.value}
        if isinstance(node, ast.Name) and type(constants.get(node.id)) is int:
            return {constants[node.id]}
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            table = constants.get(node.value.id)
            if isinstance(table, dict) and table and all(type(v) is int for v in table.values()):
                return set(table.values())
        raise AssertionError(f"{module.__name__}.run returns {ast.unparse(node)}: not a status")  # type: ignore[attr-defined]

    found: set[int] = set()
    todo: list[ast.AST] = list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            found |= values(node.value)
        todo.extend(ast.iter_child_nodes(node))
    return found


def command_parser_module(name: str) -> str:
    """The module of a command or subcommand (``"bridge offsets"``)."""
    command, _, sub = name.partition(" ")
    return SUBCOMMANDS[command][sub][0] if sub else COMMANDS[command][0]


@pytest.mark.parametrize("name", command_names())
def test_every_help_lists_exactly_the_exit_statuses_its_command_has(name: str) -> None:
    """The section cannot drift: it lists what ``run`` returns, plus the dispatcher's own
    1 (an error), 2 (bad arguments) and 130 (Ctrl-C), and nothing else."""
    module = importlib.import_module(command_parser_module(name))
    parser = command_parser(name)
    epilog = parser.epilog or ""
    assert epilog.startswith("exit status:\n"), f"{name}: no exit status section"
    listed = {int(code) for code in re.findall(r"^  (\d+) ", epilog, re.MULTILINE)}
    returned = _statuses_returned(module)
    assert 0 in returned, name
    assert listed == returned | {1, 2, 130}, name


@pytest.mark.parametrize(
    ("command", "old", "new", "seconds", "ms"),
    [
        ("consume t --zookeeper zk", "--zk-timeout", "--zk-timeout-ms", "0.25", 250),
        ("mirror t --source-zookeeper z",
         "--progress-interval", "--progress-interval-ms", "2", 2000),
        ("verify-rebalance g --zookeeper zk", "--wait", "--wait-ms", "1.5", 1500),
    ],
)  # fmt: skip
def test_deprecated_seconds_options_still_work_in_milliseconds_and_hide_from_help(
    command: str, old: str, new: str, seconds: str, ms: int
) -> None:
    """The options in seconds kept for one release: the value reaches the command in
    milliseconds where the ``*-ms`` option puts it, with a warning naming the new one;
    ``--help`` shows only the new one; the later of the two given wins."""
    name, *rest = command.split()
    parser = command_parser(name)
    dest = new.lstrip("-").replace("-", "_")
    args = parser.parse_intermixed_args([*rest, old, seconds])
    assert getattr(args, dest) == ms
    assert getattr(args, DEPRECATIONS) == [
        f"{old} (seconds) is deprecated and goes in the next release: use {new} {ms}"
    ]
    fresh = parser.parse_intermixed_args([*rest, new, "7"])
    assert getattr(fresh, dest) == 7
    assert not getattr(fresh, DEPRECATIONS, None)
    assert getattr(parser.parse_intermixed_args([*rest, new, "7", old, seconds]), dest) == ms
    assert getattr(parser.parse_intermixed_args([*rest, old, seconds, new, "7"]), dest) == 7
    usage = parser.format_help()
    assert new in usage
    assert re.search(rf"{old}(?!-ms)", usage) is None, usage


async def test_a_deprecated_option_warns_once_on_stderr_and_still_applies() -> None:
    dead = f"127.0.0.1:{unused_port()}"
    code, _, err = await run_cli("consume", "t", "--zookeeper", dead, "--zk-timeout", "0.5")
    assert code == 1, err
    lines = err.strip().splitlines()
    assert lines == [
        "aiokafka07 consume: warning: --zk-timeout (seconds) is deprecated and goes in the "
        "next release: use --zk-timeout-ms 500",
        lines[1],
    ], err
    assert f"cannot open a ZooKeeper session at {dead}: gave up after " in lines[1]
    assert "(connection_timeout_ms=500): " in lines[1]


async def test_bad_arguments_exit_2_other_errors_1_with_one_line(tmp_path: Path) -> None:
    code, _, err = await run_cli("no-such-command")
    assert code == 2
    assert "invalid choice: 'no-such-command'" in err
    zk = ["--zookeeper", "127.0.0.1:2181"]
    perf = ["simple-consumer-perf", "--server", "kafka://127.0.0.1:1", "--topic", "t"]
    checks = [
        # Bad arguments, whether argparse or the command finds them: usage, one error, 2.
        fails("produce", status=2),  # no topic
        fails("offsets", "t", *zk, "--time", "yesterday", status=2),
        fails("produce", "t", status=2),  # no cluster
        fails("produce", "t", "--brokers", "127.0.0.1:notaport", status=2),
        fails("consume", "t", "--whitelist", "x", *zk, status=2),  # topic and whitelist
        fails("consume", "t", "--simple", "--group", "g", *zk, status=2),
        fails("groups", "describe", *zk, status=2),  # no group
        fails("mirror", "t", "--source-zookeeper", "127.0.0.1:2181", status=2),  # no target
        fails("consume", status=2),  # nothing at all
        fails(*perf, "--partition", "-1", status=2),
        # Everything else: one line, 1.
        fails("import-offsets", "g", str(tmp_path / "missing.json"), *zk),
        fails("dump-log", str(tmp_path / "missing")),
        fails("produce", "bad/topic", "--brokers", "127.0.0.1:9092", stdin=b"x\n"),
    ]
    errors = await asyncio.gather(*checks)
    assert "required: TOPIC" in errors[0]
    assert "'yesterday' is not latest, earliest" in errors[1]
    assert "give --zookeeper or --brokers (one of them)" in errors[2]
    assert "port between 1 and 65535" in errors[3]
    assert "give a TOPIC, a --whitelist or a --blacklist" in errors[4]
    assert "need group mode" in errors[5]
    assert "describe needs a GROUP" in errors[6]
    assert "give --target-zookeeper or --target-brokers" in errors[7]
    assert "give --zookeeper (or --brokers for --simple)" in errors[8]
    assert "--partition -1 is not a partition number" in errors[9]
    assert all(error.startswith("usage: aiokafka07 ") for error in errors[:10])
    assert "No such file or directory" in errors[10]
    assert "no such file or directory" in errors[11]
    assert "bad/topic" in errors[12]


async def test_unreachable_servers_fail_fast_with_one_line(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{unused_port()}"
    zk = ["--zookeeper", dead, "--zk-timeout-ms", ZK_TIMEOUT_MS]
    offsets_file = tmp_path / "offsets.json"
    offsets_file.write_text('{"offsets": {"t": {"0-0": 5}}}')
    started = time.monotonic()
    zk_errors = await asyncio.gather(
        fails("produce", "t", *zk, stdin=b"x\n"),
        fails("consume", "t", *zk),
        fails("offsets", "t", *zk),
        fails("groups", *zk),
        fails("import-offsets", "g", str(offsets_file), *zk),
        fails(
            "mirror",
            "t",
            "--source-zookeeper",
            dead,
            "--target-zookeeper",
            dead,
            "--zk-timeout-ms",
            ZK_TIMEOUT_MS,
        ),
    )
    for line in zk_errors:
        assert f"cannot open a ZooKeeper session at {dead}: gave up after " in line, line
        assert "(connection_timeout_ms=500): " in line, line
    broker_errors = await asyncio.gather(
        fails("produce", "t", "--brokers", dead, stdin=b"x\ny\n"),
        fails("consume", "t", "--brokers", dead),
        fails("offsets", "t", "--brokers", dead),
    )
    # A static broker list none of which answers fails at once, sending nothing (once
    # it runs, a producer rides out an outage within its delivery timeout).
    assert broker_errors[0].endswith(
        f"cannot connect to broker 0 at {dead}: Connect call failed "
        f"('127.0.0.1', {dead.split(':')[1]}): no broker of --brokers answers; nothing was sent"
    )
    for line in broker_errors[1:]:
        assert f"cannot connect to broker 0 at {dead}" in line
    # Nine interpreters starting on a busy machine; a command that waited for a default
    # timeout instead (the delivery timeout, 120 s) would take far longer. The lines
    # above show the timeouts given were the ones used.
    assert time.monotonic() - started < 60


async def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    code, _, err = await run_cli("--debug", "dump-log", str(tmp_path / "missing"))
    assert code == 1
    assert "Traceback" in err
    assert err.strip().splitlines()[-1].startswith("aiokafka07 dump-log: error: ")


@pytest.mark.skipif(not hasattr(signal, "SIGINT"), reason="needs POSIX signals")
async def test_ctrl_c_on_waiting_input_exits_130_without_traceback() -> None:
    """produce waiting on a terminal-like stdin that never ends: Ctrl-C stops it at once,
    even though a thread is blocked reading. (Its broker only accepts connections: a
    static list none of which answers would end the command at once.)"""
    read_fd, write_fd = os.pipe()
    try:
        async with SilentBroker() as broker:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "aiokafka07", "produce", "t", "--brokers",
                f"{broker.host}:{broker.port}", "--progress",
                stdin=read_fd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert proc.stderr is not None
            # Started and waiting for input: the progress report comes every second.
            first = await asyncio.wait_for(proc.stderr.readline(), 30)
            assert first == b"produced 0 messages, 0 B (0 msg/s, 0 B/s)\n"
            code, _, err = await stop_cli(proc)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert code == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("produced 0 messages (0 B) in ")
    assert err.strip().endswith(" to t (interrupted)")


def test_the_summary_counts_in_words_and_shows_slow_rates() -> None:
    from aiokafka07.tools.common import Progress

    progress = Progress("consumed", enabled=False)
    progress.add(1, 2)
    progress.started = time.monotonic() - 4.29
    assert re.fullmatch(
        r"consumed 1 message \(2 B\) in 4\.\d\d s: 0\.2\d msg/s, 0 B/s", progress.summary()
    ), progress.summary()
