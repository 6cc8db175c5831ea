"""The ``kafkalog`` command.

Every subcommand follows the same rules (:mod:`kafkalog.cli.output`): JSON lines for scripts with
``--format json``, each error printed once, one set of exit codes (0 ok, 1 damage found, 2 bad
input or usage, 3 records dropped by ``recover``, 128 + the signal for a command ended by SIGINT
(130) or SIGTERM (143), 141 on a closed pipe), a quiet end on a closed pipe or a Ctrl-C, and a
path that is not what the command needs refused before anything is created
(:mod:`kafkalog.cli.paths`).

Start-up is kept short (``kafkalog --version`` runs in a few tens of milliseconds): this module
imports click and nothing of kafkalog's layers; each subcommand's module is imported when that
subcommand runs or its help is shown, and imports at its top only what its options need: the
broker, the clients, the cleaner, kio (:mod:`kafkalog._kio`) are imported inside the command, so
every ``kafkalog X --help`` starts within 4x a bare Python start (``benchmarks/cli_start_bench.py``;
tests/cli/test_no_side_effects.py checks the imports).
"""

from __future__ import annotations

import os
import sys

from kafkalog.cli import interrupt

if __name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "") == "kafkalog":
    # the command itself (not a test importing this module): from here on a Ctrl-C or a SIGTERM
    # ends it quietly, also during the imports below (KafkalogGroup.main then takes over)
    interrupt.install_at_start()

import importlib
import logging
from typing import Any, List, Optional

import click

from kafkalog import __version__
from kafkalog.cli.output import quiet_broken_pipe

__all__ = ["main"]

#: subcommand -> the module defining it (imported when it runs or its help is shown)
COMMANDS = {
    "bootstrap-topics": "kafkalog.cli.bootstrap_topics",
    "compact": "kafkalog.cli.compact",
    "consume": "kafkalog.cli.consume",
    "describe": "kafkalog.cli.describe",
    "dump": "kafkalog.cli.dump",
    "groups": "kafkalog.cli.groups",
    "offsets": "kafkalog.cli.offsets",
    "produce": "kafkalog.cli.produce",
    "recover": "kafkalog.cli.recover",
    "serve": "kafkalog.cli.serve",
    "top": "kafkalog.cli.top",
    "verify": "kafkalog.cli.verify",
}


class KafkalogGroup(click.Group):
    """The command group: subcommands imported on use, whole summaries in ``--help``, a quiet end
    on a closed pipe, and the exit status of the signal on SIGINT or SIGTERM."""

    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        module = COMMANDS.get(cmd_name)
        if module is None:
            return None
        cmd = getattr(importlib.import_module(module), cmd_name.replace("-", "_"))   # a lazy command, by name
        self.add_command(cmd)
        return cmd

    def resolve_command(self, ctx: click.Context, args: List[str]) -> Any:
        resolved = super().resolve_command(ctx, args)
        interrupt.check()               # a signal during the subcommand's imports
        return resolved

    def main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            previous = interrupt.install()
            try:
                interrupt.check()           # a signal during this module's imports
                return super().main(*args, **kwargs)
            finally:
                interrupt.restore(previous)     # (a signal in here is the exception below)
        except BaseException as e:
            interrupted = None if isinstance(e, SystemExit) else interrupt.raised_in(e)
            if interrupted is None:
                raise
            sys.stdout.flush()
            sys.exit(interrupted.exit_code)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:         # before click turns it into a plain exit 1
            quiet_broken_pipe()

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            rows.append((name, cmd.get_short_help_str(limit=200)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=KafkalogGroup, context_settings={"max_content_width": 120,
                                                   "help_option_names": ["-h", "--help"]})
@click.version_option(__version__, package_name="kafkalog", prog_name="kafkalog")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="warning", show_default=True, help="Level of log messages on stderr.")
def main(log_level: str = "warning") -> None:
    """kafkalog: Kafka's log storage engine. Inspect, verify, recover and compact Kafka data
    directories, produce and consume records, and serve them to Kafka clients."""
    # a signal is only recorded while logging sets up: one raised inside StreamHandler() would leave
    # a half-made handler (registered, without its lock) that logging.shutdown trips on at exit,
    # printing a traceback after the command ended quietly
    with interrupt.flagged() as got:
        logging.basicConfig(level=logging.getLevelNamesMapping()[log_level.upper()],
                            format="%(levelname)s %(name)s: %(message)s")
    if got:
        raise interrupt.Interrupted(got[0])


def all_commands() -> List[click.Command]:
    """Every subcommand (imports them all: for ``--help`` and the tests)."""
    ctx = click.Context(main)
    return [c for c in (main.get_command(ctx, n) for n in main.list_commands(ctx)) if c is not None]


if __name__ == "__main__":
    main()
