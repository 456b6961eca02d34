"""The lab's certificates: a CA of its own for each TLS server, and the certificates it signs.

Every lab server that speaks TLS (Redis, OpenBao, SeaweedFS's S3 and its gRPC) gets its own CA,
so a probe that trusts one server's CA is refused by another's and "the declared CA only" stays
a real check. Keys are made by ``openssl`` with umask 077; certificates are public.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from meshtui.atomic import write_private
from meshtui.errors import LabError

_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def openssl(folder: Path, *args: str) -> None:
    """Run ``openssl ARGS`` in ``folder`` (no shell, a fixed environment, keys 0600); LabError
    with the end of its stderr when it fails."""
    done = subprocess.run(
        ["openssl", *args], cwd=folder, env=_ENV, capture_output=True, text=True, check=False,
        umask=0o077, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if done.returncode != 0:
        raise LabError(f"openssl {args[0]} failed: {done.stderr.strip()[-400:]}")


def authority(folder: Path, name: str, subject: str) -> None:
    """A self-signed CA ``name.pem`` (key ``name.key``) for 30 days, unless already there."""
    if (folder / f"{name}.pem").exists():
        return
    openssl(
        folder,
        "req", "-x509", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "30",
        "-subj", f"/CN={subject}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip


def certificate(folder: Path, name: str, ca: str, sans: str, usage: str) -> None:
    """A certificate ``name.pem`` (key ``name.key``) signed by the CA ``ca``, with the
    subjectAltNames ``sans`` and extendedKeyUsage ``usage``, unless already there."""
    if (folder / f"{name}.pem").exists():
        return
    openssl(
        folder, "req", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}"
    )
    write_private(
        folder / f"{name}.ext",
        f"subjectAltName={sans}\nbasicConstraints=CA:FALSE\n"
        f"keyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n".encode(),
    )
    openssl(
        folder,
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.pem", "-days", "30", "-extfile", f"{name}.ext",
    )  # fmt: skip


def make_certificates(folder: Path, address: str, *, server: str) -> None:
    """A lab CA (``ca.pem``) of its own for the server named ``server``, and a certificate for
    ``address`` (an IP subjectAltName) that it signed (``server.pem``, key ``server.key``
    0600), unless already there. Both certificates are left readable: probes read ``ca.pem``."""
    if (folder / "server.pem").exists() and (folder / "ca.pem").exists():
        return
    authority(folder, "ca", f"meshtui lab {server} CA")
    certificate(folder, "server", "ca", f"IP:{address}", "serverAuth")
    for public in ("ca.pem", "server.pem"):
        (folder / public).chmod(0o644)
