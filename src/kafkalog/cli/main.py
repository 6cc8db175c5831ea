"""The `kafkalog` command."""
import click


@click.group()
@click.version_option(package_name="kafkalog")
def main() -> None:
    """kafkalog: Kafka's log storage engine, offline and embedded."""


if __name__ == "__main__":
    main()
