"""The one place the agent turns an exception into an answer: :data:`ANSWERS`, read by
:func:`answering` (httpx's ``map_exceptions`` is the model).

A request goes through steps (its body read, its envelope opened, its sequence number taken,
its shape checked, its work done); an exception a step may raise becomes a :class:`Refused`,
the status and the error text of the answer, signed (quoting the request's nonce) once the
request is known to be the controller's, bare before. Any other exception is not an answer and
goes on.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from starlette.requests import ClientDisconnect

from meshtui.errors import EnvelopeError, FencedError, MeshtuiError, MessageError, OffClockError

BODY_TIMEOUT_S = 30.0
"""How long a request's body may take to arrive."""


class BodyTooLong(Exception):
    """A request's body ran past the length it declared (or the agent's limit)."""


class Step(enum.Enum):
    """Where in its handling a request failed."""

    READ = "read"  # its body received
    OPEN = "open"  # its envelope verified
    TAKE = "take"  # its sequence number taken (no replay)
    CHECK = "check"  # its payload checked against its kind's shape
    WORK = "work"  # its work done


@dataclass(frozen=True)
class Asked:
    """What is known of the request when it failed: this node, and, once its envelope is
    opened, its kind, its nonce and whether it was recorded (``recorded`` fills as it is)."""

    node: str = ""
    kind: str = ""
    nonce: str | None = None
    recorded: Sequence[int] = field(default_factory=tuple)


class Refused(Exception):
    """An answer that is not the work's: its status and error text; ``nonce`` is the one the
    signed answer quotes (None: answered unsigned)."""

    def __init__(
        self, status: int, error: str, nonce: str | None, fields: Mapping[str, float] | None = None
    ) -> None:
        super().__init__(error)
        self.status, self.error, self.nonce = status, error, nonce
        self.fields: Mapping[str, float] = fields or {}
        """What the answer says beside its text, for the controller to act on (a fenced
        request's ``highest`` epoch, and ``at``, when the node first accepted it)."""


@dataclass(frozen=True)
class Answer:
    """One row of :data:`ANSWERS`: an exception of ``raised`` at ``step`` is answered
    ``status`` with what ``says`` makes of it; ``signed``: quoting the request's nonce."""

    step: Step
    raised: type[BaseException]
    status: int
    says: Callable[[BaseException, Asked], str]
    signed: bool = True
    fields: Callable[[BaseException], Mapping[str, float]] | None = None


def _text(exc: BaseException, asked: Asked) -> str:
    return str(exc)


def _failed(exc: BaseException, asked: Asked) -> str:
    what = (
        f"{asked.kind} failed on {asked.node}"
        if asked.recorded
        else f"{asked.node} cannot record the request"
    )
    return f"{what}: {exc.strerror if isinstance(exc, OSError) else exc}"


def _highest(exc: BaseException) -> Mapping[str, float]:
    if not isinstance(exc, FencedError):
        return {}
    return {"highest": exc.highest} if exc.at is None else {"highest": exc.highest, "at": exc.at}


ANSWERS: tuple[Answer, ...] = (
    Answer(Step.READ, BodyTooLong, 413, lambda e, a: "request body longer than declared", False),
    Answer(
        Step.READ,
        TimeoutError,
        408,
        lambda e, a: f"request body not received within {BODY_TIMEOUT_S:.0f}s",
        False,
    ),
    Answer(Step.READ, ClientDisconnect, 400, lambda e, a: "the client went away", False),
    # signed by the controller, but off this clock: it was authenticated, so quote its nonce
    Answer(Step.OPEN, OffClockError, 403, _text),
    # unsigned: nobody is known yet, and the node's signature must never cover an answer to
    # whoever asked (an on-path attacker would relay it as the node's word)
    Answer(Step.OPEN, EnvelopeError, 403, _text, False),
    Answer(Step.TAKE, EnvelopeError, 403, _text),  # the controller's, but used
    # the controller's, under an epoch another controller's lease has passed
    Answer(Step.TAKE, FencedError, 409, _text, fields=_highest),
    Answer(Step.CHECK, MessageError, 400, lambda e, a: f"{a.node} refused: {e}"),
    Answer(Step.WORK, OSError, 500, _failed),
    Answer(Step.WORK, MeshtuiError, 422, _text),
    # a value that has the shape but not the meaning
    Answer(Step.WORK, ValueError, 400, lambda e, a: f"{a.node} refused {a.kind}: {e}"),
)
"""Every exception the agent answers, by step, first match wins."""


def _nonce(exc: BaseException, asked: Asked) -> str | None:
    if asked.nonce is not None:
        return asked.nonce
    return exc.nonce if isinstance(exc, OffClockError) else None


@contextmanager
def answering(step: Step, asked: Asked | None = None) -> Iterator[None]:
    """Raise :class:`Refused` for an exception of ``step`` that :data:`ANSWERS` answers."""
    try:
        yield
    except Exception as exc:
        known = asked or Asked()
        for row in ANSWERS:
            if row.step is step and isinstance(exc, row.raised):
                nonce = _nonce(exc, known) if row.signed else None
                fields = row.fields(exc) if row.fields is not None else None
                raise Refused(row.status, row.says(exc, known), nonce, fields) from None
        raise
