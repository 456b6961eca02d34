"""The agent's one table from an exception to an answer: each row gives its status and text,
signed only once the request is known to be the controller's, and anything else goes on."""

from __future__ import annotations

import errno

import pytest
from starlette.requests import ClientDisconnect

from meshtui.errors import EnvelopeError, MeshtuiError, MessageError, OffClockError
from meshtui.host.server.answers import Asked, BodyTooLong, Refused, Step, answering

ASKED = Asked("db1", "deliver", "n" * 32, [7])


@pytest.mark.parametrize(
    ("step", "raised", "status", "error", "nonce"),
    [
        (Step.READ, BodyTooLong(), 413, "request body longer than declared", None),
        (Step.READ, TimeoutError(), 408, "request body not received within 30s", None),
        (Step.READ, ClientDisconnect(), 400, "the client went away", None),
        (Step.OPEN, OffClockError("off by 2 h", "c" * 32), 403, "off by 2 h", "c" * 32),
        (Step.OPEN, EnvelopeError("bad signature"), 403, "bad signature", None),
        (Step.TAKE, EnvelopeError("replayed"), 403, "replayed", "n" * 32),
        (Step.CHECK, MessageError("at x: missing"), 400, "db1 refused: at x: missing", "n" * 32),
        (
            Step.WORK,
            OSError(errno.ENOSPC, "No space left on device"),
            500,
            "deliver failed on db1: No space left on device",
            "n" * 32,
        ),
        (Step.WORK, MeshtuiError("no such pair"), 422, "no such pair", "n" * 32),
        (Step.WORK, ValueError("not a port"), 400, "db1 refused deliver: not a port", "n" * 32),
    ],
)
def test_each_row_answers_its_exception(
    step: Step, raised: Exception, status: int, error: str, nonce: str | None
) -> None:
    asked = ASKED if step in (Step.TAKE, Step.CHECK, Step.WORK) else Asked("db1")
    with pytest.raises(Refused) as refused, answering(step, asked):
        raise raised
    assert (refused.value.status, refused.value.error, refused.value.nonce) == (
        status,
        error,
        nonce,
    )


def test_a_failure_before_the_request_is_recorded_says_so() -> None:
    with pytest.raises(Refused) as refused, answering(Step.WORK, Asked("db1", "deliver", "n")):
        raise OSError(errno.EIO, "Input/output error")
    assert refused.value.error == "db1 cannot record the request: Input/output error"


@pytest.mark.parametrize("step", list(Step))
def test_an_exception_no_row_answers_goes_on(step: Step) -> None:
    with pytest.raises(KeyError), answering(step, ASKED):
        raise KeyError("not an answer")


def test_a_row_answers_only_at_its_step() -> None:
    # a malformed payload found while the work runs is the work's error, not the shape check's
    with pytest.raises(Refused) as refused, answering(Step.WORK, ASKED):
        raise MessageError("at y: wrong")
    assert refused.value.status == 422
