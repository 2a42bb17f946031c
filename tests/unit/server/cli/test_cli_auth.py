"""`trainyard login/logout/whoami/token ...`, where the URL and token come from, and the
credentials file, against the real REST API on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from cli_servers import ApiServer, Cli
from typer.testing import Result

from trainyard.client import credentials
from trainyard.client.http import DEFAULT_URL, resolve
from trainyard.exec.procfs import free_port


def _error(result: Result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_login_whoami_logout(api_server: ApiServer, cli: Cli) -> None:
    ada = api_server.tokens["ada"]
    assert "no API token" in _error(cli("whoami"))

    logged = cli("login", api_server.url + "/", "--token", ada)
    assert logged.exit_code == 0, logged.output
    assert f"logged in to {api_server.url} as ada (role member, tenant acme)" in logged.stdout
    assert stat.S_IMODE(cli.config.stat().st_mode) == 0o600
    assert json.loads(cli.config.read_text()) == {"url": api_server.url, "token": ada}

    who = cli("whoami")  # the stored login, no options
    assert who.exit_code == 0, who.output
    assert who.stdout.strip() == f"ada (role member, tenant acme) at {api_server.url}"
    assert json.loads(cli("whoami", "--json").stdout)["role"] == "member"
    assert cli("jobs").stdout.strip() == "no jobs"

    out = cli("logout")
    assert out.exit_code == 0 and f"logged out (removed {cli.config})" in out.stdout
    assert not cli.config.exists()
    assert "not logged in" in cli("logout").stdout
    message = _error(cli("jobs"))
    assert f"no API token for {DEFAULT_URL}" in message and "trainyard login" in message


def test_login_reads_stdin_and_refuses_a_bad_token(api_server: ApiServer, cli: Cli) -> None:
    root = api_server.tokens["root"]
    from_stdin = cli("login", api_server.url, "--token", "-", input=root + "\n")
    assert from_stdin.exit_code == 0, from_stdin.output
    assert "as root (role admin" in from_stdin.stdout

    bad = _error(cli("login", api_server.url, "--token", "ty_000000000000_nope"))
    assert bad.startswith("error: invalid, expired or revoked token")
    assert json.loads(cli.config.read_text())["token"] == root  # the old login is kept
    assert _error(cli("login", api_server.url)).startswith("error: login needs --token")
    assert _error(cli("login", "ftp://x", "--token", root)).startswith("error: URL: ")


def test_where_the_token_comes_from(
    api_server: ApiServer, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = api_server.tokens
    credentials.save(api_server.url, tokens["ada"])
    assert "ada (" in cli("whoami").stdout
    monkeypatch.setenv("TRAINYARD_TOKEN", tokens["vic"])
    assert "vic (" in cli("whoami").stdout  # the environment beats the stored login
    assert "root (" in cli("whoami", "--token", tokens["root"]).stdout  # an option beats both
    monkeypatch.delenv("TRAINYARD_TOKEN")

    # the stored token is never sent to another server
    other = f"http://127.0.0.1:{free_port()}"
    message = _error(cli("whoami", "--url", other))
    assert f"no API token for {other}" in message and f"is for {api_server.url}" in message
    monkeypatch.setenv("TRAINYARD_URL", api_server.url)
    assert "ada (" in cli("whoami").stdout
    assert resolve().url == api_server.url
    assert resolve(url="localhost:1/").url == "http://localhost:1"
    assert _error(cli("whoami", "--url", "not a url")).startswith("error: --url: ")


def test_bad_tokens_and_unreachable_server(api_server: ApiServer, cli: Cli) -> None:
    message = _error(cli("jobs", "--url", api_server.url, "--token", "ty_000000000000_x"))
    assert message.startswith("error: invalid, expired or revoked token")
    assert "trainyard login" in message
    nowhere = f"http://127.0.0.1:{free_port()}"
    down = _error(cli("jobs", "--url", nowhere, "--token", "t"))
    assert down.startswith(f"error: cannot reach trainyard at {nowhere}: ")
    assert down.endswith("is `trainyard up` running?")
    login = _error(cli("login", nowhere, "--token", "t"))
    assert login.startswith(f"error: cannot reach trainyard at {nowhere}")
    assert not cli.config.exists()


def test_tokens_create_list_revoke(api_server: ApiServer, cli: Cli) -> None:
    ada = api_server.tokens["ada"]
    created = cli("token", "create", "--name", "laptop", "--expires-in", "30d", token=ada)
    assert created.exit_code == 0, created.output
    new = created.stdout.strip()
    assert new.startswith("ty_") and "shown only now" in created.stderr
    token_id = new.split("_")[1]
    assert "expires" in created.stderr and "(in 29d23h)" in created.stderr

    listed = cli("token", "list", token=new)
    assert listed.exit_code == 0, listed.output
    assert f"{token_id} *" in listed.stdout and "laptop" in listed.stdout
    rows = json.loads(cli("token", "list", "--json", token=ada).stdout)["tokens"]
    assert {r["name"] for r in rows} >= {"laptop"}

    revoked = cli("token", "revoke", token_id, token=ada)
    assert revoked.exit_code == 0, revoked.output
    assert revoked.stdout.strip() == f"revoked token {token_id} (laptop) of ada"
    assert "revoked" in cli("token", "list", token=ada).stdout
    again = cli("token", "revoke", token_id, token=ada)  # outside review 12: said "revoked" again
    assert again.exit_code == 0, again.output
    assert again.stdout.startswith(f"token {token_id} (laptop) of ada was already revoked at ")
    assert _error(cli("whoami", token=new)).startswith("error: invalid, expired or revoked")
    assert _error(cli("token", "revoke", "ffffffffffff", token=ada)) == (
        "error: token 'ffffffffffff' not found"
    )
    assert _error(cli("token", "create", "--expires-in", "soon", token=ada)).startswith(
        "error: --expires-in: 'soon' is not a duration"
    )
    assert _error(cli("token", "create", "--expires-in", "99999d", token=ada)).startswith(
        "error: --expires-in: '99999d' is longer than ten years"
    )
    long_name = _error(cli("token", "create", "--name", "x" * 65, token=ada))
    assert long_name.startswith("error: name: ")


def test_logout_revoke(api_server: ApiServer, cli: Cli) -> None:
    ada = api_server.tokens["ada"]
    new = cli("token", "create", "--name", "temp", token=ada).stdout.strip()
    assert cli("login", api_server.url, "--token", new).exit_code == 0
    out = cli("logout", "--revoke")
    assert out.exit_code == 0, out.output
    assert f"revoked token {new.split('_')[1]}" in out.stdout and "logged out" in out.stdout
    assert _error(cli("whoami", token=new)).startswith("error: invalid, expired or revoked")


def test_credentials_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli) -> None:
    monkeypatch.delenv("TRAINYARD_CONFIG")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert credentials.credentials_path() == tmp_path / "xdg" / "trainyard" / "credentials.json"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".config" / "trainyard" / "credentials.json"
    assert credentials.credentials_path() == expected
    monkeypatch.setenv("TRAINYARD_CONFIG", str(cli.config))
    assert credentials.credentials_path() == cli.config

    assert credentials.load() is None and credentials.problem() is None
    assert credentials.save("http://h:1", "tok") == cli.config
    assert stat.S_IMODE(cli.config.parent.stat().st_mode) == 0o700
    assert credentials.load() == credentials.Credentials(url="http://h:1", token="tok")
    cli.config.chmod(0o644)
    credentials.save("http://h:2", "tok2")
    assert stat.S_IMODE(cli.config.stat().st_mode) == 0o600
    assert list(cli.config.parent.iterdir()) == [cli.config]  # no temporary file left

    cli.config.write_text("{not json")
    assert credentials.load() is None and credentials.problem() == "is not valid JSON"
    message = _error(cli("whoami", "--url", "http://h:2"))
    assert f"the credentials file {cli.config} is not valid JSON" in message
    cli.config.write_text('{"url": "http://h:1"}')
    assert "lacks" in (credentials.problem() or "")
    assert credentials.clear() is True and credentials.clear() is False
