"""The signed body is decoded into its typed shape: a bad field is refused, naming the field.

Real keys and real signatures: each body here is signed by the controller's key, so what is
refused is refused for its shape, after the signature checked out (as a buggy or newer sender's
message would be), never for the signature.
"""

from __future__ import annotations

import json
import time

import pytest

from meshtui import crypto
from meshtui.errors import EnvelopeError
from meshtui.protocol import wire

KEYS = crypto.PrivateKeys.generate(node=False)
VERIFY = KEYS.public().verify


def good_body() -> dict[str, object]:
    """A body as :func:`wire.envelope` writes it (version 2)."""
    return {
        "v": wire.VERSION,
        "kind": wire.STATE,
        "from": wire.CONTROLLER,
        "to": "app1",
        "at": time.time(),
        "seq": 12,
        "nonce": "ab" * 16,
        "reply_to": None,
        "payload": {"holdings": False},
    }


def signed(body: dict[str, object]) -> dict[str, str]:
    raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    return {"body": crypto.b64(raw), "sig": crypto.b64(KEYS.sign(raw))}


def opened(envelope: object) -> wire.Message:
    return wire.open_envelope(envelope, verify_key=VERIFY, sender=wire.CONTROLLER, to="app1")


def a_head(seq: int = 3, digest: str = "ab" * 32) -> wire.HeadJson:
    return {
        "seq": seq,
        "hash": digest,
        "sig": crypto.b64(KEYS.sign(wire.head_message(seq, digest))),
    }


def test_a_body_as_the_sender_writes_it_opens_with_its_fields() -> None:
    body = {**good_body(), "head": a_head()}
    msg = opened(signed(body))
    assert (msg.kind, msg.sender, msg.to, msg.seq, msg.nonce) == (
        wire.STATE,
        wire.CONTROLLER,
        "app1",
        12,
        "ab" * 16,
    )
    assert bytes(msg.payload) == b'{"holdings":false}' and msg.reply_to is None
    assert msg.head is not None and msg.head.verifies(VERIFY) and msg.head.to_json() == a_head()


def test_the_envelope_signs_the_same_bytes_as_before() -> None:
    """The wire format is unchanged: compact JSON, sorted keys, signed as written."""
    env, nonce = wire.envelope(
        wire.PROBE, {"targets": []}, sender=wire.CONTROLLER, to="app1", keys=KEYS
    )
    raw = crypto.unb64(env["body"])
    body = json.loads(raw)
    assert raw == json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    assert sorted(body) == ["at", "from", "kind", "nonce", "payload", "reply_to", "seq", "to", "v"]
    crypto.verify(raw, crypto.unb64(env["sig"]), VERIFY, wire.CONTROLLER)
    assert opened(env).nonce == nonce


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"seq": "12"}, "Expected `int`, got `str` - at `$.seq`"),
        ({"seq": -1}, "Expected `int` >= 0 - at `$.seq`"),
        ({"seq": True}, "Expected `int`, got `bool` - at `$.seq`"),
        ({"at": "now"}, "Expected `float`, got `str` - at `$.at`"),
        ({"kind": 3}, "Expected `str`, got `int` - at `$.kind`"),
        ({"payload": []}, "its payload is not an object"),
        ({"reply_to": 5}, "Expected `str | null`, got `int` - at `$.reply_to`"),
        ({"to": None}, "Expected `str`, got `null` - at `$.to`"),
        ({"surprise": 1}, "Object contains unknown field `surprise`"),
        ({"head": {**a_head(), "seq": 0}}, "Expected `int` >= 1 - at `$.head.seq`"),
        ({"head": {**a_head(), "hash": "zz"}}, "at `$.head.hash`"),
        ({"head": {"seq": 3, "hash": "ab" * 32}}, "missing required field `sig` - at `$.head`"),
    ],
)
def test_a_signed_body_with_a_bad_field_is_refused_naming_it(
    change: dict[str, object], named: str
) -> None:
    with pytest.raises(EnvelopeError) as caught:
        opened(signed({**good_body(), **change}))
    assert str(caught.value).startswith("refused: signed body is malformed: ")
    assert named in str(caught.value)


def test_a_missing_field_is_named() -> None:
    body = good_body()
    del body["nonce"]
    with pytest.raises(EnvelopeError, match="missing required field `nonce`"):
        opened(signed(body))


def test_another_version_says_to_update_even_when_its_fields_differ() -> None:
    old = good_body()
    old["v"] = 1
    del old["seq"]  # version 1 had no sequence number
    with pytest.raises(EnvelopeError, match="message version 1, expected 3 .update meshtui"):
        opened(signed(old))
    with pytest.raises(EnvelopeError, match="message version 4, expected 3"):
        opened(signed({**good_body(), "v": 4}))


@pytest.mark.parametrize("envelope", [{"body": "e30="}, {"body": 1, "sig": "x"}, [], "x"])
def test_what_is_not_an_envelope_is_refused_as_such(envelope: object) -> None:
    with pytest.raises(EnvelopeError, match="not a meshtui envelope"):
        opened(envelope)


def test_a_kept_head_is_read_by_its_typed_shape() -> None:
    assert wire.SignedHead.from_json(a_head()).seq == 3
    with pytest.raises(ValueError, match=r"not an audit head: .* at `\$.seq`"):
        wire.SignedHead.from_json({**a_head(), "seq": "3"})  # type: ignore[typeddict-item]
    with pytest.raises(ValueError, match=r"at `\$.hash`"):
        wire.SignedHead.from_json({**a_head(), "hash": "AB" * 32})


def test_the_key_is_chosen_by_the_bodys_controller_name_and_a_strange_name_is_not_repeated() -> (
    None
):
    asked: list[str | None] = []

    def key_of(name: str | None) -> bytes:
        asked.append(name)
        return VERIFY

    msg = wire.open_envelope(
        signed({**good_body(), "controller": "ctl-a", "epoch": 4}),
        verify_key=key_of,
        sender="controller",
        to="app1",
    )
    assert asked == ["ctl-a"] and msg.controller == "ctl-a" and msg.epoch == 4
    for strange in ["x" * 5000, "CTL", "ctl a", "", 7]:
        with pytest.raises(EnvelopeError, match="its controller is not a name") as refused:
            wire.open_envelope(
                signed({**good_body(), "controller": strange}),
                verify_key=key_of,
                sender="controller",
                to="app1",
            )
        assert "xxxxx" not in str(refused.value)
    assert asked == ["ctl-a"]  # never asked for a key by a name of another shape
    with pytest.raises(EnvelopeError, match=r"\$\.epoch"):
        opened(signed({**good_body(), "epoch": -1}))
