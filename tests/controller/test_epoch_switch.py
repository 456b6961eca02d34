"""The lease's database switched to a standby that had not received the last holding: the next
taker gets that holding's epoch again. Real agents and a real PostgreSQL lease: the nodes that
accepted the lost holding refuse the new one's equal epoch, the new holder raises its epoch past
the one they hold (said in the audit) and delivers, and the lost holder stays fenced."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql

from meshtui import crypto
from meshtui.controller.agents.client import AgentClient
from meshtui.errors import FencedOutError
from meshtui.protocol import messages, wire
from meshtui.protocol.fence import Fence
from tests.controller.test_rotate import GITEA, can_login, login_of, mesh  # noqa: F401
from tests.controller.test_turn_lost import DB, share_lease

CREDENTIAL = "srv/app1/gitea/db.password"
NOTHING: messages.WithdrawRequest = {"consumer": []}


def _lease_epoch(pg) -> int:
    info = psycopg.conninfo.make_conninfo(pg.admin_conninfo(), dbname=DB)
    with psycopg.connect(info) as conn:
        row = conn.execute(sql.SQL("SELECT epoch FROM lease WHERE name = 'deliver'")).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize(
    ("ahead", "said"),
    [(0, "epoch {next} was already taken on this node"), (2, "epoch {next} is behind epoch")],
)
def test_an_epoch_the_switch_lost_is_raised_past_and_its_lost_holder_stays_fenced(
    mesh,  # noqa: F811
    pg,
    ahead: int,
    said: str,
) -> None:
    """``ahead``: how many more holdings than one the switch lost (the lost holder's epoch is
    that many past the next taker's): one command meets the refusal, the next delivers."""
    share_lease(mesh.state, pg)
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)
        assert ctl.push().ok
        rows = ctl.inventory.nodes()
    following = _lease_epoch(pg) + 1  # the epoch the next holding takes
    lost = following + ahead
    keys = crypto.load_private(mesh.state / "controller.key")
    holders = {  # the lost holding: it delivered under that epoch, then the database lost it
        node: AgentClient(rows[node], keys, sequence=wire.Sequence(), fence=lambda: Fence("ctl-z", lost))
        for node in mesh.nodes
    }  # fmt: skip
    for client in holders.values():
        assert client.call(messages.WITHDRAW, NOTHING) == NOTHING

    first = mesh.cli("rotate", "--yes", GITEA)  # refused where the lost holding was: rolled back
    out = first.stdout + first.stderr
    assert said.format(next=following) in out, out
    with mesh.controller(read_only=True) as ctl:
        (event,) = [e for e in ctl.inventory.events() if e["kind"] == "lease-epoch-raised"]
    raised = event["detail"]["raised"]
    assert {r["node_epoch"] for r in raised} == {lost}
    assert all(r["epoch"] == lost + 1 for r in raised), raised

    again = mesh.cli("rotate", "--yes", GITEA)
    assert again.returncode == 0, again.stdout + again.stderr
    assert can_login(pg, login_of(mesh, GITEA), mesh.secret(CREDENTIAL), "gitea_app1") is True
    assert _lease_epoch(pg) > lost + 1
    for node in ("app1", "db1"):  # the lost holder, woken: behind where the pair's ends are
        client = holders[node]
        try:
            client.call(messages.WITHDRAW, NOTHING)
        except FencedOutError as refused:
            assert refused.highest is not None and refused.highest > lost, node
        else:
            raise AssertionError(f"{node} accepted the lost holding's epoch {lost}")
    verified = mesh.cli("audit", "--verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_request_signed_before_a_raise_is_signed_again_under_the_raised_epoch(
    mesh,  # noqa: F811
    pg,
) -> None:
    """A rotation signs its consumers' deliveries ahead. A raise meanwhile (another node held
    a lost holding's epoch) must not leave them under the old epoch: a node the raised epoch
    reached first would refuse this holder's own request, and the holder would raise again."""
    from meshtui.controller import lock

    share_lease(mesh.state, pg)
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)
        assert ctl.push().ok
        rows = ctl.inventory.nodes()
    following = _lease_epoch(pg) + 1
    keys = crypto.load_private(mesh.state / "controller.key")
    lost = AgentClient(
        rows["db1"], keys, sequence=wire.Sequence(), fence=lambda: Fence("ctl-z", following)
    )
    assert lost.call(messages.WITHDRAW, NOTHING) == NOTHING
    with mesh.controller() as ctl, lock.delivering(ctl, "rotate"), ctl.agents() as agents:
        assert ctl.fence.epoch == following and ctl.turn is not None
        ahead = agents.client("app1").sign(messages.WITHDRAW, NOTHING)
        with pytest.raises(FencedOutError):  # db1 holds the lost holding's equal epoch
            agents.client("db1").call(messages.WITHDRAW, NOTHING)
        assert ctl.fence.epoch == following + 1
        assert agents.client("app1").call(messages.WITHDRAW, NOTHING) == NOTHING
        assert agents.client("app1").call(messages.WITHDRAW, NOTHING, signed=ahead) == NOTHING
        assert [ours for _, _, ours in ctl.turn.raised] == [following + 1]


def test_a_holding_delivered_after_this_inventory_raised_past_it_is_not_raised_past_again(
    mesh,  # noqa: F811
    pg,
) -> None:
    """Two controllers on two databases (a failover gone wrong: one still on the old primary)
    each hold a lease the other's database does not know. Raising past the other's epoch
    once repairs a switch; the other delivering under a higher epoch again after that is no
    holding a switch lost: raising past it again would let both deliver by turns. The nodes
    keep fencing this one, and the refusal says why."""
    share_lease(mesh.state, pg)
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)
        assert ctl.push().ok
        rows = ctl.inventory.nodes()
    keys = crypto.load_private(mesh.state / "controller.key")
    other = [_lease_epoch(pg) + 1]  # the other database's lease, as its holder signs it
    holders = {
        node: AgentClient(rows[node], keys, sequence=wire.Sequence(), fence=lambda: Fence("ctl-z", other[0]))
        for node in mesh.nodes
    }  # fmt: skip
    for client in holders.values():
        assert client.call(messages.WITHDRAW, NOTHING) == NOTHING
    first = mesh.cli("rotate", "--yes", GITEA)  # meets it: raised past it once
    assert first.returncode != 0
    with mesh.controller(read_only=True) as ctl:
        (event,) = [e for e in ctl.inventory.events() if e["kind"] == "lease-epoch-raised"]
    ours = max(r["epoch"] for r in event["detail"]["raised"])

    other[0] = ours + 3  # the other raised past ours on its database, and delivers again
    for client in holders.values():
        assert client.call(messages.WITHDRAW, NOTHING) == NOTHING
    for _ in range(2):
        again = mesh.cli("rotate", "--yes", GITEA)
        out = again.stdout + again.stderr
        assert again.returncode != 0, out
        assert "a lease this database does not know" in out, out
    with mesh.controller(read_only=True) as ctl:
        raised = [e for e in ctl.inventory.events() if e["kind"] == "lease-epoch-raised"]
    assert len(raised) == 1
    assert _lease_epoch(pg) < other[0]


def test_a_node_claiming_an_epoch_beyond_any_real_one_is_not_raised_past(
    mesh,  # noqa: F811
    pg,
) -> None:
    """Root on one node can make its agent say any epoch (its guard is its own file). A
    node speaks only for its own ends: raising the lease to the epoch it claims would let it
    end every controller's turns (the next taking overflows the lease's bigint)."""
    from meshtui.atomic import write_private
    from meshtui.controller import lock

    share_lease(mesh.state, pg)
    with mesh.controller() as ctl:
        ctl.declare(mesh.decl)
        assert ctl.push().ok
    mesh.stop("db1")
    tampered = {"floor": 0, "recent": [], "consumer": {}, "provider": {}, "epoch": 2**63 - 2}
    write_private(mesh.nodes["db1"] / "accepted.log", (json.dumps(tampered) + "\n").encode())
    mesh.start("db1")

    refused = mesh.cli("rotate", "--yes", GITEA)
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "beyond any epoch a lease gives" in out, out
    assert _lease_epoch(pg) < 2**53
    with mesh.controller() as ctl, lock.delivering(ctl, "push"):  # the turn is still taken
        assert 0 < ctl.fence.epoch < 2**53
