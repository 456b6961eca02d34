"""What a provider kind brings, as one typed record: :class:`Kind`.

A kind (PostgreSQL, Redis, ...) is one package under ``meshtui/kinds/``; its ``__init__.py``
holds its :class:`Kind` and nothing heavier. The record carries what every layer may ask of the
kind. What the core needs at ``declare`` (the words, the ``values`` check) is a plain value;
what a layer above the core needs (the provisioner's adapter, the agent's probe, doctor's
admin-file check, the lab's server) is a :class:`Ref`, a lazy reference loaded on first use, so
that the core never imports a layer above it and a layer never imports a kind it does not serve
(psycopg's adapters map and Harlequin's per-adapter packages do the same).

Core: this module imports nothing of meshtui.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_KIND = "postgres"
"""The kind of a ``provides`` entry that names none. Read only by the registry (``kind_of``) and
by the dataclass defaults of the shapes it fills; nowhere else decides it."""


class ValuesError(ValueError):
    """A consumer's ``values`` the provider's kind cannot grant; says which value and why."""


ValuesCheck = Callable[[str, Mapping[str, str]], None]
"""``check(login, values)``: raise :class:`ValuesError` for values this kind cannot grant."""


def accept_values(login: str, values: Mapping[str, str]) -> None:
    """The values check of a kind that gives ``values`` no meaning of its own to refuse."""


def owns_nothing(login: str, values: Mapping[str, str]) -> tuple[str, ...]:
    """The ``owns`` of a kind whose consumers claim nothing at the provider for themselves."""
    return ()


@dataclass(frozen=True)
class ConnectionFacts:
    """What a consumer's app needs to reach its provider, other than the password: the inputs
    of a kind's :attr:`Kind.connection`."""

    login: str
    host: str
    port: int
    values: Mapping[str, str]
    ca: str | None  # the CA that signed the server's certificate (None: not declared)
    tls: bool
    password_file: str  # the credential file (the password itself is never in these facts)
    owner: str = ""  # the pair's login when ``login`` is one of its alternates


@dataclass(frozen=True)
class Connection:
    """A kind's connection facts in the shapes apps read: ``fields`` (JSON), ``env`` (the
    client library's own variable names where it has them) and ``dsn`` (one line a client
    takes whole). None of them holds a password."""

    fields: Mapping[str, str]
    env: Mapping[str, str]
    dsn: str


ConnectionOf = Callable[[ConnectionFacts], Connection]
"""``connection(facts)``: what a kind writes into a consumer's connection file."""


@dataclass(frozen=True)
class Ref:
    """A lazy reference to ``name`` in ``module`` (or to the module itself when ``name`` is
    None): the module is imported on :meth:`load` only.

    Written as ``Ref("meshtui.kinds.redis.probe", "probe")``; a test loads every reference of
    every registered kind, so a typo fails there and not on an operator's node.
    """

    module: str
    name: str | None = None

    def load(self) -> Any:
        """The referenced object (its module imported now, once per process)."""
        module = importlib.import_module(self.module)
        return module if self.name is None else getattr(module, self.name)

    def __str__(self) -> str:
        return self.module if self.name is None else f"{self.module}:{self.name}"


@dataclass(frozen=True)
class Kind:
    """Everything one provider kind is, as the rest of meshtui may ask for it.

    Words (the screen, ``status`` and error messages say them): ``title`` (``"PostgreSQL"``),
    ``login_word`` (what the server calls a login: ``"role"``, ``"ACL user"``), ``admin_word``
    (what the admin file holds), ``admin_example`` (one such text, with no real secret) and
    ``admin_fix`` (the declaration line that sets one).

    Declaration: ``port`` is the server's usual port (the lab's and the docs' default);
    ``check_values`` checks a consumer's ``values`` at ``declare``; ``tls`` says whether a
    ``provides`` entry of this kind takes ``ca`` and ``tls`` (a server whose certificate the
    consumers' probes verify).

    Lazy references (see :class:`Ref`), each to be called as the layer that uses it says:

    * ``adapter``: the provisioner's :data:`~meshtui.contracts.adapter.AdapterFactory`;
    * ``kept``: optional, a class whose instance keeps admin sessions between runs in a
      long-lived agent; its ``open`` is an ``AdapterFactory`` (the agent keeps one per kind);
    * ``finish``: optional, ``finish(admin, manifest, outcomes) -> Outcome | None`` run after a
      whole reconcile (PostgreSQL: the pin block of pg_hba.conf);
    * ``probe``: ``probe(target: ProbeTarget, options: ProbeOptions) -> ProbeResult``, one login
      and its negative control (meshtui.contracts.probe_types), the same signature for every kind;
    * ``doctor``: optional, ``check(provider: CheckProvider, path) -> list[(problem, fix)]``,
      what the admin file lacks for the built-in provisioner (run on the provider's node);
    * ``lab``: the kind's :class:`~meshtui.contracts.lab_server.LabServer` (its ``lab.py``'s
      ``LAB``), which raises a real server of this kind for the lab and the demo;
    * ``own_secrets``: optional, the kind stores modules' own secrets (a vault): an
      :class:`~meshtui.contracts.vault_store.OwnSecretStore`, the agent's only way to it;
    * ``server_config``: optional, a :class:`~meshtui.contracts.server_config.ServerRecipe`:
      the files a real server of this kind needs for the mesh (TLS, the provisioner's
      least-privilege admin, what expires), which ``meshtui kind config`` prints and the
      kind's ``lab.py`` writes its lab server's files with.

    ``finish_name``: the name of the report line of ``finish`` (PostgreSQL: ``pg_hba.conf``);
    the controller records a pinned provider end whose line failed as not confined.
    ``workers``: how many sessions the provisioner uses at most for one run (None: its default).
    ``dbname``: ``dbname(login, values)``, what a probe of a consumer with this login (the
    pair's, an alternating pair's owner) and these ``values`` names as its database.
    ``owns``: ``owns(login, values)``, what a consumer claims at its provider for itself alone
    (an object store's buckets); ``declare`` refuses a second consumer of one provider that
    claims the same. Each claim is recorded in the inventory with the consumer that made it,
    and stays its after it is withdrawn or moves elsewhere.
    ``takes_over``: ``takes_over(login, values)``, the claims (as ``owns`` names them) this
    consumer takes from whoever held them before; ``declare`` refuses any other claim another
    module held.
    ``connection``: what a consumer's connection file holds (None: the kind writes none).
    ``units``: the credential file formats holding the login with the password that a
    consumer of this kind may declare (``format``, :mod:`meshtui.credential_unit`).
    ``hands_over``: whether a login gives the server the credential itself (a password sent,
    as Redis's AUTH and an AppRole login do; not a proof of it, as SCRAM and SigV4 are): the
    agent then sends it only to a server its node policy lists (``[[servers]]``).
    ``alternate_word``: what an alternate of an alternating pair is to the server (PostgreSQL's
    ``"role"``, SeaweedFS's ``"access key"``; empty: its ``login_word``).
    """

    name: str
    title: str
    port: int
    login_word: str
    admin_word: str
    admin_fix: str
    admin_example: str
    adapter: Ref
    probe: Ref
    lab: Ref
    check_values: ValuesCheck = accept_values
    tls: bool = False
    kept: Ref | None = None
    finish: Ref | None = None
    doctor: Ref | None = None
    workers: int | None = None
    finish_name: str = "pin"
    dbname: Callable[[str, Mapping[str, str]], str] = lambda login, values: ""
    owns: Callable[[str, Mapping[str, str]], tuple[str, ...]] = owns_nothing
    takes_over: Callable[[str, Mapping[str, str]], tuple[str, ...]] = owns_nothing
    connection: ConnectionOf | None = None
    units: tuple[str, ...] = ()
    hands_over: bool = False
    alternate_word: str = ""
    own_secrets: Ref | None = None
    server_config: Ref | None = None

    def refs(self) -> dict[str, Ref]:
        """Every lazy reference this kind declares, by field name (for the registry's test)."""
        named = {
            "adapter": self.adapter,
            "probe": self.probe,
            "lab": self.lab,
            "kept": self.kept,
            "finish": self.finish,
            "doctor": self.doctor,
            "own_secrets": self.own_secrets,
            "server_config": self.server_config,
        }
        return {k: v for k, v in named.items() if v is not None}
