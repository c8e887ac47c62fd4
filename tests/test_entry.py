import pytest

from mcp_proxy.entry import parse_plain_record


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["record", "--", "srv", "-x"], (None, None, ["srv", "-x"])),
        (
            ["record", "--name", "fs", "--db", "/d.db", "--", "npx", "--", "y"],
            ("fs", "/d.db", ["npx", "--", "y"]),
        ),
        (["record", "-n", "fs", "--", "srv"], ("fs", None, ["srv"])),
        (["record", "--name=-odd", "--db=x.db", "--", "srv"], ("-odd", "x.db", ["srv"])),
    ],
)
def test_the_plain_stdio_form_takes_the_fast_path(argv: list[str], expected: tuple) -> None:
    assert parse_plain_record(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["sessions"],
        ["record", "--upstream", "http://x/mcp"],
        ["record", "--help", "--", "srv"],
        ["record", "--name", "fs", "--"],
        ["record", "--name", "--", "srv"],
        ["record", "--upstream", "http://x", "--", "srv"],
        ["record", "--unknown", "--", "srv"],
        ["record", "-n=fs", "--", "srv"],
    ],
)
def test_everything_else_goes_to_the_typer_app(argv: list[str]) -> None:
    assert parse_plain_record(argv) is None
