"""The ``kafkalog`` command: ``produce``, ``consume``, ``describe``, ``verify``, ``recover``,
``dump`` (and ``compact`` when the cleaner provides it).

Machine-readable output is JSON lines; exit codes are 0 (ok), 1 (corruption found / command
failed), 2 (bad input or usage). A typed :class:`~kafkalog.errors.KafkalogError` is printed as one
clear message (and a JSON error line), never as a traceback.
"""
import importlib
import logging

import click


@click.group()
@click.version_option(package_name="kafkalog")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="warning", show_default=True, help="Level of log messages on stderr.")
def main(log_level: str = "warning") -> None:
    """kafkalog: Kafka's log storage engine, offline and embedded."""
    logging.basicConfig(level=getattr(logging, log_level.upper()),
                        format="%(levelname)s %(name)s: %(message)s")


from kafkalog.cli.dump import dump  # noqa: E402

main.add_command(dump)

for _module, _name in (("produce", "produce"), ("consume", "consume"), ("describe", "describe"),
                       ("verify", "verify"), ("recover", "recover"), ("compact", "compact"), ("serve", "serve")):
    try:
        _mod = importlib.import_module(f"kafkalog.cli.{_module}")
    except ImportError:
        if _module == "compact":
            continue
        raise
    _cmd = getattr(_mod, _name, None)
    if isinstance(_cmd, click.Command):
        main.add_command(_cmd)


if __name__ == "__main__":
    main()
