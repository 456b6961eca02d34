"""The object store: S3 identities on SeaweedFS (see docs/seaweedfs.md).

Each pair is one S3 identity: its access key is the pair's login, its secret key the pair's
credential, its rights (read, write, list) scoped to the consumer's own bucket(s). The package
holds one module a job: ``values`` (what a consumer may ask for, checked at ``declare``),
``shell`` (``weed shell`` with commands on stdin and output kept private), ``adapter`` (the
provisioner's side), ``probe`` (a SigV4-signed request over TLS) and ``lab`` (SeaweedFS in a
node's namespace as its own user).
"""

KIND = "seaweedfs"
"""The ``kind`` a ``provides`` entry names for this object store."""
