"""What an object-store consumer's connection file holds: its access key, the store's S3
endpoint, its bucket(s), the CA and where its secret key is, in the AWS SDKs' own variable
names where they have them (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``AWS_CA_BUNDLE``).
Never the secret key. Core: pure."""

from __future__ import annotations

from meshtui.kinds.kind import Connection, ConnectionFacts, ValuesError
from meshtui.kinds.seaweedfs.values import REGION, grant_for


def connection(facts: ConnectionFacts) -> Connection:
    """access_key, endpoint, region, bucket(s), ca and the secret key's file."""
    host = f"[{facts.host}]" if ":" in facts.host else facts.host
    endpoint = f"{'https' if facts.tls else 'http'}://{host}:{facts.port}"
    try:
        buckets = grant_for(facts.owner or facts.login, facts.values).buckets
    except ValuesError:
        buckets = ()
    fields = {"access_key": facts.login, "endpoint": endpoint, "region": REGION}
    if buckets:
        fields |= {"bucket": buckets[0], "buckets": " ".join(buckets)}
    if facts.ca:
        fields["ca"] = facts.ca
    fields["secret_key_file"] = facts.password_file
    env = {
        "AWS_ACCESS_KEY_ID": facts.login,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": REGION,
        **({"AWS_CA_BUNDLE": facts.ca} if facts.ca else {}),
        **({"S3_BUCKET": buckets[0]} if buckets else {}),
        "AWS_SECRET_ACCESS_KEY_FILE": facts.password_file,
    }
    dsn = f"{endpoint}/{buckets[0]}" if buckets else endpoint
    return Connection(fields=fields, env=env, dsn=dsn)
