"""A node policy's ``[[controllers]]``: read by name with each key, and refused (naming the file
and the key, with the fix) when an entry is malformed or its .pub file could be changed by
another user."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from meshtui import crypto
from meshtui.errors import PolicyFileError
from meshtui.host.policy import node_policy

HEAD = "version = 1\n"


def policy(tmp_path: Path, text: str) -> node_policy.Policy:
    node = tmp_path / "node"
    node.mkdir(mode=0o700, exist_ok=True)
    node_policy.write(node, HEAD + text)
    return node_policy.load(node, "app1")


def pub_file(folder: Path, name: str = "ctl.pub") -> tuple[Path, bytes]:
    keys = crypto.PrivateKeys.generate(node=False)
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    path = folder / name
    path.write_text(keys.public().to_toml())
    path.chmod(0o644)
    return path, keys.public().verify


def test_controllers_by_pub_file_and_by_verify_key(tmp_path):
    path, key_a = pub_file(tmp_path / "keys")
    key_b = crypto.PrivateKeys.generate(node=False).public().verify
    got = policy(
        tmp_path,
        f'[[controllers]]\nname = "ctl-a"\npub = "{path}"\n\n'
        f'[[controllers]]\nname = "ctl-b"\nverify = "{crypto.b64(key_b)}"\n',
    )
    assert {c.name: c.verify for c in got.controllers} == {"ctl-a": key_a, "ctl-b": key_b}


def test_no_controllers_named_is_the_pinned_key_alone(tmp_path):
    assert policy(tmp_path, "").controllers == ()


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ('name = "CTL A"\nverify = "x"', "is not a controller name"),
        ('name = "ctl-a"', "needs exactly one of pub"),
        ('name = "ctl-a"\nverify = "AAAA"', "is not 32 bytes"),
        ('name = "ctl-a"\nverify = "AAAA"\nkey = "x"', "is not a policy key"),
        ('name = "ctl-a"\npub = "relative.pub"', "absolute"),
        ('name = "ctl-a"\npub = "/nonexistent/ctl.pub"', "nonexistent"),
    ],
)
def test_a_malformed_entry_is_refused_naming_the_key(tmp_path, entry, says):
    with pytest.raises(PolicyFileError, match=says) as refused:
        policy(tmp_path, f"[[controllers]]\n{entry}\n")
    assert "controllers[0]" in str(refused.value)


def test_a_name_listed_twice_is_refused(tmp_path):
    key = crypto.b64(crypto.PrivateKeys.generate(node=False).public().verify)
    entry = f'[[controllers]]\nname = "ctl-a"\nverify = "{key}"\n'
    with pytest.raises(PolicyFileError, match="named twice"):
        policy(tmp_path, entry + "\n" + entry)


def test_a_pub_file_another_user_can_change_is_refused(tmp_path):
    path, _ = pub_file(tmp_path / "keys")
    path.chmod(0o666)
    with pytest.raises(PolicyFileError, match="can be changed by another user"):
        policy(tmp_path, f'[[controllers]]\nname = "ctl-a"\npub = "{path}"\n')


def test_a_pub_file_in_a_folder_others_can_write_is_refused(tmp_path):
    path, _ = pub_file(tmp_path / "open")
    os.chmod(tmp_path / "open", 0o777)  # anyone could put another key there
    with pytest.raises(PolicyFileError, match="open"):
        policy(tmp_path, f'[[controllers]]\nname = "ctl-a"\npub = "{path}"\n')


def test_a_pub_file_that_is_a_link_is_refused(tmp_path):
    path, _ = pub_file(tmp_path / "keys")
    link = tmp_path / "keys" / "link.pub"
    link.symlink_to(path)
    with pytest.raises(PolicyFileError, match="link"):
        policy(tmp_path, f'[[controllers]]\nname = "ctl-a"\npub = "{link}"\n')
