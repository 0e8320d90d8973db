"""``hal server``, ``hal agent`` and ``hal cache`` TLS and token options: a file that
cannot be used, or half a pair, stops the command before it starts with what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.cli.main import main
from hal.host.certs import init_ca, issue


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    init_ca(tmp_path / "pki")
    issue(tmp_path / "pki", "head", dns=["head"])
    return tmp_path / "pki"


def test_the_server_refuses_half_a_pair_and_unusable_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, pki: Path
) -> None:
    data = ["server", "--data-dir", str(tmp_path / "data"), "--port", "1"]
    code, err = run(capsys, *data, "--tls-cert", str(pki / "head.pem"))
    assert code == 2
    assert "both --tls-cert and --tls-key" in err
    code, err = run(
        capsys, *data, "--tls-cert", str(pki / "ca.pem"), "--tls-key", str(pki / "head.key")
    )
    assert code == 2
    assert "cannot use the certificate" in err
    assert "hal certs issue NAME" in err
    code, err = run(capsys, *data, "--client-ca", str(pki / "ca.pem"))
    assert code == 2
    assert "--client-ca needs TLS" in err


def test_the_agent_refuses_a_ca_file_it_cannot_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HAL_TOKEN", "hal_x")
    for name in ("HAL_CA_FILE", "HAL_TLS_CERT", "HAL_TLS_KEY"):
        monkeypatch.setenv(name, "")  # (unset; restored after: the command sets them)
    argv = ["agent", "--server", "https://head:8470", "--state-dir", str(tmp_path / "a")]
    code, err = run(capsys, *argv, "--ca-file", str(tmp_path / "missing.pem"))
    assert code == 2
    assert "as the CA to trust" in err
    code, err = run(capsys, *argv, "--tls-cert", str(tmp_path / "node.pem"))
    assert code == 2
    assert "both --tls-cert and --tls-key" in err


def test_an_empty_cache_token_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    db = f"sqlite:///{tmp_path / 'cp.db'}"
    code, err = run(capsys, "cache", "control-plane", "--db", db, "--token-file", str(empty))
    assert code == 2
    assert "is empty" in err
