"""The object store as a provider kind: S3 identities on SeaweedFS (README: "Object storage").

Each pair is one S3 identity: its access key is the pair's login, its secret key the pair's
credential, its rights (read, write, list) scoped to the consumer's own bucket(s). The package:
``values.py`` (what a consumer may ask for, checked at ``declare``: its buckets, each its own
alone, and its rights), ``shell.py`` (``weed shell`` with commands on stdin, output kept
private), ``adapter.py`` (the provisioner's adapter), ``probe.py`` (a SigV4-signed request over
verified TLS and its control), ``doctor.py`` (the admin file and the static identity), ``connection.py`` (what a
consumer's connection file holds) and ``lab.py`` (SeaweedFS in a node's namespace as its own user).
This file holds the record only.
"""

from __future__ import annotations

from meshtui.kinds.kind import Kind, Ref
from meshtui.kinds.seaweedfs.connection import connection
from meshtui.kinds.seaweedfs.values import check_values, owned_buckets, probed_bucket, taken_over

KIND = Kind(
    name="seaweedfs",
    title="SeaweedFS",
    port=8333,
    login_word="S3 identity",
    alternate_word="access key",
    admin_word="object store admin file",
    admin_fix='set admin = "/path/admin.toml" (a 0600 file naming the master and the filer)',
    admin_example='master = "127.0.0.1:9333"  filer = "127.0.0.1:8888"  admin = "meshtui-admin"',
    adapter=Ref("meshtui.kinds.seaweedfs.adapter", "SeaweedAdapter"),
    probe=Ref("meshtui.kinds.seaweedfs.probe", "probe"),
    lab=Ref("meshtui.kinds.seaweedfs.lab", "LAB"),
    doctor=Ref("meshtui.kinds.seaweedfs.doctor", "admin_rights"),
    check_values=check_values,
    tls=True,
    workers=1,  # one weed shell at a time: each is a process and reads the whole configuration
    dbname=probed_bucket,
    owns=owned_buckets,
    takes_over=taken_over,
    connection=connection,
    units=("aws",),
    server_config=Ref("meshtui.kinds.seaweedfs.server_config", "RECIPE"),
)
