"""The ``kafkalog`` command.

Every subcommand follows the same rules (:mod:`kafkalog.cli.output`): JSON lines for scripts with
``--format json``, each error printed once, exit codes 0 (ok) / 1 (damage found) / 2 (usage or input
error), a quiet end on a closed pipe, and a path that is not what the command needs is refused
before anything is created (:mod:`kafkalog.cli.paths`).
"""

from __future__ import annotations

import logging
from typing import Any

import click

from kafkalog.cli.output import quiet_broken_pipe

__all__ = ["main"]


class KafkalogGroup(click.Group):
    """The command group: whole summaries in ``--help`` and a quiet end on a closed pipe."""

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
@click.version_option(package_name="kafkalog")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="warning", show_default=True, help="Level of log messages on stderr.")
def main(log_level: str = "warning") -> None:
    """kafkalog: Kafka's log storage engine. Inspect, verify, recover and compact Kafka data
    directories, produce and consume records, and serve them to Kafka clients."""
    logging.basicConfig(level=getattr(logging, log_level.upper()),
                        format="%(levelname)s %(name)s: %(message)s")


def _register() -> None:
    from kafkalog.cli.bootstrap_topics import bootstrap_topics
    from kafkalog.cli.compact import compact
    from kafkalog.cli.consume import consume
    from kafkalog.cli.describe import describe
    from kafkalog.cli.dump import dump
    from kafkalog.cli.groups import groups
    from kafkalog.cli.offsets import offsets
    from kafkalog.cli.produce import produce
    from kafkalog.cli.recover import recover
    from kafkalog.cli.serve import serve
    from kafkalog.cli.verify import verify
    for cmd in (dump, produce, consume, describe, offsets, groups, verify, recover, compact, serve,
                bootstrap_topics):
        main.add_command(cmd)


_register()


if __name__ == "__main__":
    main()
