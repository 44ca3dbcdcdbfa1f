"""``gpuyard config show``: the settings of this process, with what each one means."""

from __future__ import annotations

import typer

app = typer.Typer(help="Show settings.", no_args_is_help=True)


@app.command("show")
def show(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Print every setting, its value and its GPUYARD_* variable."""
    from rich.table import Table

    from gpuyard.cli.output import console, print_json
    from gpuyard.settings import Settings

    settings = Settings()
    if as_json:
        print_json(settings.model_dump(mode="json"))
        return
    table = Table("variable", "value", "meaning", box=None)
    for name, field in Settings.model_fields.items():
        value = getattr(settings, name)
        table.add_row(
            f"GPUYARD_{name.upper()}", "" if value is None else str(value), field.description or ""
        )
    console().print(table)
