"""A small certificate authority for a site without one (``hal certs init|issue``).

``init_ca(dir)`` writes ``ca.pem`` (the certificate every client and agent trusts) and
``ca.key`` (mode 0600: whoever reads it can issue certificates); ``issue(dir, name, ...)``
writes ``NAME.pem`` and ``NAME.key`` signed by it: a server certificate for the DNS names
and addresses clients reach it at, or a client certificate (an agent's, its common name
the node's name, for mutual TLS). Any site CA does the same job: HAL reads PEM files.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hal.core.errors import Conflict, InvalidRequest

CA_DAYS = 3650
CERT_DAYS = 825  # what browsers accept for a server certificate


def init_ca(folder: Path, *, name: str = "HAL site CA", days: int = CA_DAYS) -> Path:
    """Make ``folder``/ca.pem and ca.key; an existing CA is never overwritten."""
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / "ca.pem", folder / "ca.key"
    if cert_path.exists() or key_path.exists():
        raise Conflict(
            f"{folder} already holds a CA ({cert_path.name}); issue certificates with "
            f"`hal certs issue NAME --dir {folder}`, or choose another --dir",
            field="dir",
        )
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path


def issue(
    folder: Path,
    name: str,
    *,
    dns: list[str] | tuple[str, ...] = (),
    ips: list[str] | tuple[str, ...] = (),
    client: bool = False,
    days: int = CERT_DAYS,
    not_before: datetime.datetime | None = None,
) -> tuple[Path, Path]:
    """Make ``folder``/NAME.pem and NAME.key signed by the CA there: a server certificate
    for ``dns`` and ``ips`` (``name`` too when none is given), or with ``client`` one that
    proves ``name`` (a node's name: its common name and DNS name). ``not_before``: the
    start of its validity (tests make expired ones)."""
    if not name or "/" in name or name.startswith("."):
        raise InvalidRequest(
            f"certificate name {name!r}: use a plain name such as the host's", field="name"
        )
    ca_cert, ca_key = _load_ca(folder)
    addresses = [_ip(text) for text in ips]
    names = list(dns) or ([] if addresses else [name])
    if client and name not in names:
        names.insert(0, name)
    key = ec.generate_private_key(ec.SECP256R1())
    start = not_before or _now() - datetime.timedelta(minutes=5)
    alt: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    alt += [x509.IPAddress(a) for a in addresses]
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{name}.pem", folder / f"{name}.key"
    _write_key(key_path, key)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def _load_ca(folder: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate((folder / "ca.pem").read_bytes())
        key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), None)
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) else str(err)
        raise InvalidRequest(
            f"no usable CA in {folder} ({reason}); make one with `hal certs init --dir "
            f"{folder}`, or point --dir at the folder holding ca.pem and ca.key",
            field="dir",
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise InvalidRequest(
            f"{folder}/ca.key is not a key `hal certs init` made; issue certificates with "
            "the tools of the CA that made it",
            field="dir",
        )
    return cert, key


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise InvalidRequest(
            f"--ip {text!r} is not an IP address; give names with --dns", field="ip"
        ) from None


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode otherwise
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
