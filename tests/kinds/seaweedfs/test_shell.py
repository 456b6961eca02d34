"""``weed shell``'s output never reaches a message with a secret in it (no server needed)."""

from __future__ import annotations

import pytest

from meshtui.errors import ProvisionError
from meshtui.kinds.seaweedfs.adapter import Admin
from meshtui.kinds.seaweedfs.shell import errors

SECRET = "Zk3Q9v_secret-value-0123456789abcdefghijklmn"


def test_error_lines_are_kept_and_secrets_are_not() -> None:
    output = "\n".join(
        [
            "{",
            f'  "secretKey":  "{SECRET}",',  # s3.configure's echo of the identity
            "}",
            f'invalid value "{SECRET}" for flag -secret_key: bad',
            f"error: s3.configure -user=a -secret_key={SECRET} failed",
            "error: bucket gitea-lfs already exists",
        ]
    )
    said = errors(output, [SECRET])
    assert SECRET not in said
    assert "bucket gitea-lfs already exists" in said
    assert "secretKey" not in said


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("not toml = = =", "not TOML"),
        ('backend = "minio"\nmaster = "a:1"\nfiler = "a:2"\nadmin = "x"', "backend 'minio'"),
        ('master = "a:1"\nadmin = "x"', "filer is missing"),
        ('master = "a:1; rm -rf /"\nfiler = "a:2"\nadmin = "x"', "must be host:port"),
    ],
)
def test_a_bad_admin_file_is_named(text: str, words: str) -> None:
    with pytest.raises(ProvisionError, match=words):
        Admin.parse(text)


@pytest.mark.parametrize("weed", ["/bin/false", "/bin/true"])
def test_a_shell_that_ends_before_answering_is_an_error_not_a_wait(weed: str) -> None:
    """The run's kept shell ends before it answers (a broken binary, a refused certificate):
    the provisioner says so at once and names the store, never waiting out its timeout."""
    import time

    from meshtui.contracts.adapter import Scope
    from meshtui.kinds.seaweedfs.adapter import SeaweedAdapter

    text = (
        f'master = "127.0.0.1:1"\nfiler = "127.0.0.1:2"\nadmin = "meshtui-admin"\nweed = "{weed}"\n'
    )
    adapter = SeaweedAdapter(text, Scope("db1/s3", "objects"))
    started = time.monotonic()
    with pytest.raises(ProvisionError, match="weed shell at 127.0.0.1:1 ended"):
        adapter.inspect({})
    adapter.close()
    assert time.monotonic() - started < 10
