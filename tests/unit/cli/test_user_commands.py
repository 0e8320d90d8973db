"""``hal user token NAME``: an administrator gives a user who lost their token a new one,
printed once as ``hal user add`` prints it; the old token stops working at once.
``hal user delete NAME``: the user's token stops working; their jobs are kept. Each
change leaves an event naming the user and the administrator who made it."""

from __future__ import annotations

import pytest

from hal.cli.main import main
from hal.testing.live import LiveServer


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def as_user(monkeypatch: pytest.MonkeyPatch, token: str) -> None:
    monkeypatch.setenv("HAL_TOKEN", token)


def test_user_token_prints_a_new_token_and_the_old_one_stops_working(
    env: LiveServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    old = env.add_users("carol")["carol"]
    with env.client(old) as carol:
        assert carol.whoami().name == "carol"  # the server now has the old token cached
    code, out, err = run(capsys, "user", "token", "carol")
    assert code == 0 and err == ""
    first, second = out.splitlines()
    assert first == "new token for user carol; the old one no longer works"
    prefix = "token (shown once; give it to the user for `hal login`): "
    assert second.startswith(prefix + "hal_")
    new = second.removeprefix(prefix)
    as_user(monkeypatch, old)
    code, _, err = run(capsys, "queue")
    assert code == 3 and "unknown token" in err
    as_user(monkeypatch, new)
    assert run(capsys, "queue")[0] == 0
    code, out, _ = run(capsys, "login", "--token", new)
    assert code == 0 and "as carol" in out


def test_user_token_is_for_administrators_only(
    env: LiveServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dave = env.add_users("dave")["dave"]
    as_user(monkeypatch, dave)
    code, out, err = run(capsys, "user", "token", "dave")
    assert code == 3 and out == "" and "not an administrator" in err


def test_user_token_for_an_unknown_user_names_user_list(
    env: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "user", "token", "nobody")
    assert code == 4 and out == "" and "no user nobody (`hal user list` lists users" in err
    code, _, err = run(capsys, "user", "token", "a/b")
    assert code == 2 and "`hal user list`" in err


def test_user_delete_ends_the_users_token(
    env: LiveServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    erin = env.add_users("erin")["erin"]
    code, out, err = run(capsys, "user", "delete", "erin")
    assert (code, err) == (0, "")
    assert out == "deleted user erin; their token no longer works (their jobs are kept)\n"
    assert "erin" not in run(capsys, "user", "list")[1].split()
    as_user(monkeypatch, erin)
    code, _, err = run(capsys, "queue")
    assert code == 3 and "unknown token" in err


def test_each_change_of_a_users_access_leaves_an_event(
    env: LiveServer, capsys: pytest.CaptureFixture[str]
) -> None:
    env.add_users("frank")
    assert run(capsys, "user", "token", "frank")[0] == 0
    assert run(capsys, "user", "token", "nobody")[0] == 4  # refused: no event
    assert run(capsys, "user", "delete", "frank")[0] == 0
    with env.client() as admin:
        me = admin.whoami().name
        seen = [
            (e.kind, e.data)
            for e in admin.events(follow=False)
            if e.kind.startswith("user.") and e.data.get("name") in ("frank", "nobody")
        ]
    who = {"name": "frank", "by": me, "admin": False}
    assert seen == [("user.added", who), ("user.token_replaced", who), ("user.deleted", who)]
    assert not any("token" in key for _, data in seen for key in data)  # never the token
