"""Redis as a provider kind: logins are ACL users, marked by a selector only meshtui writes.

The package: ``acl.py`` (what a consumer's ``values`` mean as ACL rules, checked at ``declare``
too), ``adapter.py`` (the provisioner's adapter), ``probe.py`` (one ``AUTH`` over verified TLS
and its control), ``private.py`` (the private redis-py internals both rely on, in one place),
``lab.py`` (a Debian redis-server with a lab CA). This file holds the record only.
"""

from __future__ import annotations

from meshtui.kinds.kind import Kind, Ref
from meshtui.kinds.redis.acl import check_values
from meshtui.kinds.redis.connection import connection

KIND = Kind(
    name="redis",
    title="Redis",
    port=6379,
    login_word="ACL user",
    admin_word="admin Redis URL",
    admin_fix='set admin = "/path/admin.url" (a 0600 file: rediss://ADMIN:PASSWORD@HOST:PORT)',
    admin_example="rediss://ADMIN:PASSWORD@HOST:PORT with ?ssl_ca_certs=CA.pem",
    adapter=Ref("meshtui.kinds.redis.adapter", "RedisAdapter"),
    probe=Ref("meshtui.kinds.redis.probe", "probe_target"),
    doctor=Ref("meshtui.kinds.redis.doctor", "admin_rights"),
    lab=Ref("meshtui.kinds.redis.lab", "LAB"),
    check_values=check_values,
    tls=True,
    hands_over=True,
    workers=1,  # one Redis thread serves every session: a second only adds contention
    connection=connection,
    server_config=Ref("meshtui.kinds.redis.server_config", "RECIPE"),
)
