"""The `kafkalog` command."""
import click


@click.group()
@click.version_option(package_name="kafkalog")
def main() -> None:
    """kafkalog: Kafka's log storage engine, offline and embedded."""


from kafkalog.cli.dump import dump  # noqa: E402

main.add_command(dump)


if __name__ == "__main__":
    main()
