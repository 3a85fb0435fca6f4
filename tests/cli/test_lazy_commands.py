"""`import jsraft.cli` and `jsraft serve`'s own modules load none of the other subcommands' modules, nor the
monitor's (prometheus_client) or the client commands' (rich) dependencies, nor the in-process API and the
client package, nor Spark's; every command is
still reachable through the group.

Method: a fresh interpreter (subprocess) imports the module under test and prints the sorted names in
`sys.modules`; the test checks the forbidden names are absent and that the check can fail (a module that
does import them shows them). Structural, not timed: the startup time itself is in bench/startup_time.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import click

from jsraft.cli import LAZY_COMMANDS, cli

# modules `jsraft serve` (without -m) has no use for
NOT_FOR_SERVE = (
    "jsraft.cli.backup_cmd", "jsraft.cli.check_cmd", "jsraft.cli.cluster_cmd", "jsraft.cli.consumer_cmd",
    "jsraft.cli.demo", "jsraft.cli.group_cmd", "jsraft.cli.local_cluster", "jsraft.cli.msg_cmd",
    "jsraft.cli.report_cmd", "jsraft.cli.session", "jsraft.cli.store_demo", "jsraft.cli.stream_cmd",
    "jsraft.server.ops.monitor", "jsraft.server.ops.metrics", "prometheus_client", "rich", "pyspark",
    "pyarrow", "jsraft.client", "jsraft.server.api.jetstream",
)


def _modules_after(statement: str) -> set[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(result.stdout))


def test_importing_the_cli_imports_no_subcommand_module():
    loaded = _modules_after("import jsraft.cli")
    assert not loaded & set(NOT_FOR_SERVE)
    assert "jsraft.server" not in loaded  # not even serve's: its parser is built when `serve` runs


def test_serve_parser_and_config_import_only_what_serve_needs():
    loaded = _modules_after(
        "from jsraft.cli import build_parser\n"
        "args = build_parser().parse_args(['serve', '-p', '-1', '-a', '127.0.0.1'])\n"
        "from jsraft.cli.serve import config_from_args\nconfig_from_args(args)")
    assert "jsraft.cli.serve" in loaded and "jsraft.server.node" in loaded
    assert not loaded & set(NOT_FOR_SERVE)


def test_the_check_can_fail():
    """Looking a client command up does import its module (and so would show in the checks above)."""
    loaded = _modules_after("import click\nfrom jsraft.cli import cli\n"
                            "cli.get_command(click.Context(cli), 'backup')")
    assert {"jsraft.cli.backup_cmd", "jsraft.cli.session", "rich"} <= loaded


def test_every_lazy_command_resolves_to_its_name():
    context = click.Context(cli)
    names = cli.list_commands(context)
    assert set(LAZY_COMMANDS) | {"serve", "demo"} == set(names)
    for name in names:
        command = cli.get_command(context, name)
        assert command is not None and command.name == name
    stream = cli.get_command(context, "stream")
    assert isinstance(stream, click.Group)
    assert {"backup", "restore", "group", "accept-loss", "report"} <= set(stream.list_commands(context))
