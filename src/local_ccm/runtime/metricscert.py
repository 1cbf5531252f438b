"""A self-signed serving certificate for the controllers' `/metrics` (no --metrics-cert-dir).

Run as `python -m local_ccm.runtime.metricscert <name>` by
`local_ccm.runtime.metricsserver.self_signed`: it
prints the certificate and then the PKCS#8 key, PEM, and exits. A child process, so that
`cryptography` (which Python's `ssl` cannot replace: it makes no certificates) is never loaded
into a long-running process; nothing else imports this module.
"""

from __future__ import annotations

import datetime
import ipaddress
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SELF_SIGNED_DAYS = 365  # controller-runtime's self-signed certificates last a year too


def make_self_signed(name: str) -> tuple[bytes, bytes]:
    """(certificate, key) PEM: ECDSA P-256, valid a year, for `name`, localhost and loopback."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [x509.DNSName(name), x509.DNSName("localhost")]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "::1")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0]:
        print("usage: python -m local_ccm.runtime.metricscert <name>", file=sys.stderr)
        return 2
    cert, key = make_self_signed(argv[0])
    sys.stdout.buffer.write(cert + key)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
