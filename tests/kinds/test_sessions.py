"""Sessions opened with a credential a rotation replaced, on every kind's real server: a changed
password alone ends none of them (a psql session, a Redis connection, an OpenBao token all keep
working), so a rotation's run ends them (``end``) or leaves and counts them (``drain``). S3 has
no session: each request is signed on its own, so the old key is refused at the next request
whatever was chosen."""

from __future__ import annotations

import pytest

from meshtui.model import Sessions

from .contract import Provider, Server


def _keeps_sessions(server: Server) -> bool:
    return bool(server.kind.adapter.load().capabilities.live_sessions)


def test_a_changed_password_alone_ends_no_session(provider: Provider, server: Server) -> None:
    login = provider.add("app1", "gitea")
    provider.reconcile()
    old = provider.password("app1", "gitea")
    session = server.open_session(login, old)
    try:
        provider.rotate("app1", "gitea")
        (done,) = provider.reconcile().outcomes  # a run that names no sessions (push)
        assert done.outcome == "updated" and done.sessions is None
        assert not server.can_login(login, old), "the old credential still logs in"
        assert server.session_alive(session) is _keeps_sessions(server)
    finally:
        server.close_session(session)


@pytest.mark.parametrize("choice", list(Sessions))
def test_a_rotation_ends_or_counts_the_old_credentials_sessions(
    provider: Provider, server: Server, choice: Sessions
) -> None:
    login = provider.add("app1", "gitea")
    other = provider.add("app2", "web")
    provider.reconcile()
    old = provider.password("app1", "gitea")
    session = server.open_session(login, old)
    bystander = server.open_session(other, provider.password("app2", "web"))
    try:
        assert server.session_alive(session)
        provider.rotate("app1", "gitea")
        report = provider.reconcile({login: choice})
        done = {o.login: o for o in report.outcomes}
        assert done[login].outcome == "updated", report.lines()
        assert done[other].sessions is None, "a login not rotated had its sessions touched"
        assert not server.can_login(login, old)
        assert provider.can_login("app1", "gitea")
        if not _keeps_sessions(server):  # S3: the old key is refused at the next request
            assert not server.session_alive(session)
            assert done[login].sessions == 0
        elif choice is Sessions.END:
            assert not server.session_alive(session), "a session on the old credential lives"
            settled = done[login].sessions, done[login].sessions_left, done[login].sessions_ended
            assert settled == (1, 0, True)
            assert "1 session on the old credential ended" in done[login].reason
        else:
            assert server.session_alive(session), "drain ended a session"
            settled = done[login].sessions, done[login].sessions_left, done[login].sessions_ended
            assert settled == (1, 1, False)
            assert "1 session on the old credential left to drain" in done[login].reason
        assert server.session_alive(bystander), "another login's session was ended"
        fresh = server.open_session(login, provider.password("app1", "gitea"))
        try:  # a session on the new credential is not one on the old
            again = provider.reconcile({login: Sessions.END})
            assert {o.login: o.outcome for o in again.outcomes}[login] == "unchanged"
            if server.kind.name == "openbao":  # tokens say which secret_id issued them
                assert server.session_alive(fresh)
        finally:
            server.close_session(fresh)
    finally:
        server.close_session(session)
        server.close_session(bystander)


def test_sessions_left_to_drain_are_told_from_later_ones_and_ended_when_asked(
    provider: Provider, server: Server
) -> None:
    """The mark a drain's rotation takes keeps its later count and its end to the sessions
    opened with the old credential: one the consumer opened with the new since is neither
    counted nor ended, on a server that cannot tell the passwords apart too."""
    if not _keeps_sessions(server):
        pytest.skip(f"{server.kind.name} keeps no session: nothing drains")
    login = provider.add("app1", "gitea")
    provider.reconcile()
    old = server.open_session(login, provider.password("app1", "gitea"))
    provider.rotate("app1", "gitea")
    (done,) = provider.reconcile({login: Sessions.DRAIN}).outcomes
    assert (done.sessions, done.sessions_left) == (1, 1), done.reason
    assert done.sessions_mark is not None, "a drain's rotation took no mark"
    marks = {login: done.sessions_mark}
    fresh = server.open_session(login, provider.password("app1", "gitea"))
    try:
        (counted,) = provider.reconcile({login: Sessions.DRAIN}, marks).outcomes
        assert counted.outcome == "unchanged"
        assert counted.sessions == 1, "the session on the new credential was counted as old"
        assert counted.sessions_mark == done.sessions_mark
        assert server.session_alive(old)
        (ended,) = provider.reconcile({login: Sessions.END}, marks).outcomes
        assert (ended.sessions, ended.sessions_left, ended.sessions_ended) == (1, 0, True)
        assert not server.session_alive(old), "the drained session outlived its drain"
        assert server.session_alive(fresh), "the session on the new credential was ended"
    finally:
        server.close_session(fresh)
        server.close_session(old)
