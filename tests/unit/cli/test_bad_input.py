"""A user's mistakes on the ``hal`` command line get an error that says what to do, never a
traceback, and lose nothing. Against a real control plane (no agents: nothing here runs)."""

from __future__ import annotations

import fcntl
import io
import json
import os
import stat
from pathlib import Path

import pytest

from hal.cli.main import main
from hal.client.config import credentials_path, load_client_config, store_token
from hal.testing.live import LiveServer, free_port

HUGE = "9" * 23  # past the database's 64-bit integers


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "✓"],
        ["explain", "✓"],
        ["show", "1 2"],
        ["show", "1?signal=9"],
        ["show", "1/script"],
        ["cancel", "1/hold"],
    ],
)
def test_any_job_id_a_user_types_is_one_id(
    env: LiveServer, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.startswith("hal: error: invalid job id")


def test_an_empty_node_name_is_refused_before_the_request(
    env: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "drain", "", "--reason", "x")
    assert code == 2
    assert "node name is empty; `hal sinfo` lists them" in err


def test_a_job_id_past_64_bits_matches_no_job(
    env: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "show", HUGE)
    assert code == 4 and "Invalid job id specified" in err
    code, out, err = run(capsys, "acct", "-j", HUGE)
    assert (code, err) == (0, "") and out.count("\n") == 1  # the header alone
    code, out, err = run(capsys, "sacct", "-j", f"1+{HUGE}", "-n")
    assert (code, out, err) == (0, "", "")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("nonsense", "unsupported URL scheme"),
        ("http://127.0.0.1:99999", "Port out of range"),
        ("http://", "no host"),
        ("http://[::1", "Invalid IPv6 URL"),
    ],
)
def test_a_malformed_server_url_says_how_to_set_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], url: str, why: str
) -> None:
    monkeypatch.setenv("HAL_URL", url)
    monkeypatch.setenv("HAL_TOKEN", "hal_x")
    for argv, prefix in ((["queue"], "hal: error:"), (["squeue"], "squeue: error:")):
        code, _, err = run(capsys, *argv)
        assert code in (1, 2)
        assert err.startswith(prefix) and "is not a HAL server URL" in err and why in err
        assert "set HAL_URL" in err


def test_a_token_with_control_characters_is_refused(
    env: LiveServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HAL_TOKEN", "hal_abc\r\nX-Other: 1")
    code, _, err = run(capsys, "queue")
    assert code == 2 and "copy it again" in err


def test_login_with_an_empty_token_keeps_the_stored_one(
    env: LiveServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("HAL_TOKEN")
    path = store_token(env.url, "admin", env.token)
    before = path.read_text()
    code, _, err = run(capsys, "login", "--token", "")
    assert code == 2 and "--token is empty" in err
    assert path.read_text() == before
    assert json.loads(before)[env.url]["token"] == env.token


def test_login_writes_the_credentials_readable_by_their_owner_only(
    env: LiveServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The token file is written through ``credentials.tmp``; one left behind world-
    readable (a crash, a copy, an older tool) kept its mode, and the renamed credentials
    file with it: any user of the login node could read the token."""
    monkeypatch.delenv("HAL_TOKEN")
    path = credentials_path()
    path.parent.mkdir(parents=True)
    stale = path.with_suffix(".tmp")
    stale.write_text("{}")
    stale.chmod(0o644)
    code, _, err = run(capsys, "login", "--token", env.token)
    assert code == 0, err
    assert json.loads(path.read_text())[env.url]["token"] == env.token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_submit_takes_sbatch_options(env: LiveServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "submit", "--parsable", "--hold", "--wrap", "true")
    assert (code, err) == (0, "") and out.strip().isdigit()
    code, _, err = run(capsys, "submit", "--bogus", "--wrap", "true")
    assert code == 1 and "sbatch: error: unrecognized option '--bogus'" in err


def test_a_command_without_its_action_shows_its_own_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "data")
    assert code == 2 and err.startswith("usage: hal data") and "locate" in err and out == ""
    with pytest.raises(SystemExit) as exc:
        main(["topology", "show", "--bogus"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage: hal topology show" in err and "unrecognized arguments: --bogus" in err


def test_cancel_takes_signal_names(env: LiveServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "cancel", "-s", "usr1", "99999")
    assert code == 4 and "99999" in err  # reached the server: the name was understood
    with pytest.raises(SystemExit):
        main(["cancel", "-s", "FOO", "1"])
    assert "unknown signal 'FOO'; write a number (10) or a name" in capsys.readouterr().err


def test_cancelling_an_unknown_htc_session_says_it_does_not_exist(
    env: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "htc", "cancel", "nope")
    assert code == 4 and "no HTC session 'nope'" in err
    code, _, err = run(capsys, "htc", "cancel", "s0123456789ab")  # the shape of an id
    assert code == 4 and "no HTC session s0123456789ab" in err


def test_user_add_says_what_a_name_is_and_never_names_a_missing_command(
    env: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "user", "add", "bad name")
    assert code == 2 and "'bad name' is not a user name: use lowercase letters" in err
    code, _, err = run(capsys, "user", "add", "admin")
    assert code == 5 and "pick another name" in err and "`hal user token admin`" in err


def test_a_closed_pipe_ends_quietly(
    env: LiveServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    read, write = os.pipe()
    os.close(read)  # `hal nodes | head -0`: the reader is gone
    stdout = io.TextIOWrapper(os.fdopen(write, "wb"))
    monkeypatch.setattr("sys.stdout", stdout)
    assert main(["nodes"]) == 141
    assert capsys.readouterr().err == ""
    stdout.write("x" * 100_000)
    stdout.flush()  # stdout now goes nowhere: the exit's own flush cannot fail


def test_a_feature_no_constraint_could_name_stops_the_agent_before_it_starts(
    env: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "agent", "--name", "fx", "--features", "a100,fast disk")
    assert code == 2
    assert "invalid node feature 'fast disk'" in err and "--features a100,ib" in err
    assert not [n for n in env.client().nodes() if n.name == "fx"]  # never registered


def test_a_server_whose_database_is_down_says_so_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = "postgresql://postgres@127.0.0.1:1/hal"  # nothing listens on port 1
    code, _, err = run(capsys, "server", "--db", url, "--port", "18999")
    assert code == 6 and "Traceback" not in err
    assert err == (
        f"hal: error: the database {url} is unavailable: PostgreSQL cannot be reached; "
        "start it or fix --db, then start the server again\n"
    )


@pytest.mark.parametrize("command", ["up", "server"])
def test_a_state_directory_that_cannot_be_made_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """`--data-dir` naming a file (or a place the user may not write) ended in the
    traceback of a mkdir; now one line names the directory and what to give instead."""
    taken = tmp_path / "hal.db"
    taken.write_text("not a directory")
    code, _, err = run(capsys, command, "--data-dir", str(taken), "--port", "18998")
    assert code == 2
    assert err == (
        f"hal: error: cannot use {taken} as HAL's state directory: File exists; give "
        "--data-dir (or HAL_DATA_DIR) a directory this user may write\n"
    )


@pytest.mark.parametrize("db", ["hal.db", "mysql://hal@db/hal", "postgresql://hal@db:port/x"])
def test_a_database_url_hal_cannot_use_is_refused_by_the_parser(
    capsys: pytest.CaptureFixture[str], db: str
) -> None:
    """A typo in --db (a bare path, another database, a bad port) ended in SQLAlchemy's
    traceback; now it is a usage error that says what to write."""
    with pytest.raises(SystemExit) as exc:
        main(["server", "--db", db, "--port", "18998"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --db: {db!r} is not a database URL HAL can use" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["up", "server"])
def test_a_scheduler_profile_mistake_names_the_file_and_the_field(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """A bad value under [scheduler] in hal.toml said only "backfill: must be a
    non-negative number" (which key? which file?) and exited 1, where every other
    mistake in the file names both and exits 2."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    config = tmp_path / "hal.toml"
    config.write_text('[scheduler.plugin_args.backfill]\nwindow_s = "1 day"\n')
    argv = [command, "--config", str(config), "--data-dir", str(tmp_path / "data")]
    code, _, err = run(capsys, *argv, "--port", str(free_port()))
    assert code == 2
    assert err.startswith(
        f"hal: error: {config}: scheduler.plugin_args.backfill.window_s: backfill: "
        "must be a non-negative number, not '1 day'"
    )


def test_an_agent_on_a_state_directory_in_use_says_so_in_one_line(
    env: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second `hal agent` on the state directory another agent holds (the same
    default directory for two agents on one host) ended in a StateDirLocked traceback."""
    state = tmp_path / "agent-state"
    state.mkdir()
    with open(state / "agent.lock", "w") as held:  # what the running agent holds
        fcntl.flock(held, fcntl.LOCK_EX)
        code, _, err = run(capsys, "agent", "--name", "second", "--state-dir", str(state))
    assert code == 5
    assert err == (
        f"hal: error: another agent is running with state directory {state}; stop it, or "
        "give this one its own --state-dir\n"
    )


def test_a_topology_mistake_in_hal_toml_is_a_usage_error_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Errors with a code of their own (invalid_topology, invalid_profile,
    database_unavailable) fell through the CLI's exit codes to 1; they exit as the kind
    they refine (here a bad request: 2), and a [topology] mistake names its file."""
    config = tmp_path / "hal.toml"
    config.write_text('[[topology.switches]]\nname = "s0"\nnodes = "n1"\nlink_sped = 1\n')
    code, _, err = run(capsys, "server", "--config", str(config), "--data-dir", str(tmp_path))
    assert code == 2
    assert err.startswith(
        f"hal: error: {config}: topology.switches[0]: unknown key(s) ['link_sped'] "
        "(did you mean 'link_speed'?)"
    )


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_hal_url_means_the_local_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], empty: str
) -> None:
    """`export HAL_URL=` (emptied, not unset) was "'' is not a HAL server URL", where an
    empty HAL_TOKEN or HAL_RETRY_SECONDS means the default."""
    monkeypatch.setenv("HAL_URL", empty)
    assert load_client_config().url == "http://127.0.0.1:8470"
    monkeypatch.setenv("HAL_TOKEN", "hal_x")
    monkeypatch.setenv("HAL_RETRY_SECONDS", "0")
    _, _, err = run(capsys, "queue")
    assert "is not a HAL server URL" not in err


def test_the_token_hal_up_stored_serves_localhost_too(
    env: LiveServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hal up` stores its token for http://127.0.0.1:PORT; a user who set
    HAL_URL=http://localhost:PORT (the same server) got "missing token"."""
    monkeypatch.delenv("HAL_TOKEN")
    store_token(env.url, "admin", env.token)  # as `hal up` does
    assert env.url.startswith("http://127.0.0.1:")
    monkeypatch.setenv("HAL_URL", env.url.replace("127.0.0.1", "localhost"))
    code, _, err = run(capsys, "queue")
    assert (code, err) == (0, "")
    monkeypatch.setenv("HAL_URL", env.url.replace("127.0.0.1", "localhost.localdomain."))
    assert load_client_config().token is None  # only this machine's loopback names


def test_a_config_directory_hal_up_cannot_write_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read-only or missing place for credentials.json (a container's HOME) ended
    `hal up` in a mkdir traceback, its control plane never started."""
    taken = tmp_path / "config"
    taken.write_text("a file, not a directory")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(taken))
    argv = ["up", "--data-dir", str(tmp_path / "data"), "--agents", "0"]
    code, _, err = run(capsys, *argv, "--port", str(free_port()))
    assert code == 2
    assert err == (
        f"hal: error: cannot write the token to {taken}/hal/credentials.json: Not a "
        "directory; set XDG_CONFIG_HOME (or HOME) to a directory this user may write\n"
    )


def test_a_database_from_a_newer_hal_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """State written by a newer HAL (a user back on an older checkout): `hal up` and
    `hal server` ended in a RuntimeError traceback."""
    from sqlalchemy import text

    from hal.server.control_plane import sqlite_url
    from hal.state.store import SqlStateStore

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    store = SqlStateStore(sqlite_url(tmp_path / "data"))
    known = store.migrate()
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE hal_meta SET value = 999 WHERE key = 'schema_version'"))
    store.close()
    for command in ("up", "server"):
        argv = [command, "--data-dir", str(tmp_path / "data"), "--port", str(free_port())]
        code, _, err = run(capsys, *argv)
        assert code == 5
        assert err == (
            f"hal: error: the database schema is version 999, newer than this HAL's {known} "
            "(a newer HAL wrote it): run that HAL, or upgrade this one\n"
        )
