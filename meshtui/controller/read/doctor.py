"""``meshtui doctor``: the preflight, before anything is pushed; one line per problem, with a fix.

Every declared node is sent one signed ``check`` request (through :meth:`Controller.contact`,
so read-only refuses) listing what that node must verify itself (:mod:`meshtui.host.checks`):
its consumers' credential folders, owners, groups and reload commands, its providers' admin
files and the admin's rights, a TCP connect from it to each provider port its consumers use,
and whether its own policy allows every declared path, owner, group, kind, admin file and
command (check ``policy``). Here: the answer must be signed by the declared key, and the node's clock (in its signed
answer) must agree with this one within the signing window.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from meshtui import crypto
from meshtui.controller.read.status import overlaps
from meshtui.controller.reports import Progress
from meshtui.credential_unit import PASSWORD
from meshtui.errors import AgentError
from meshtui.freeform import JsonObject
from meshtui.inventory.rows import ModuleRow, NodeRow, PairRow
from meshtui.kinds import registry
from meshtui.model import End, is_builtin, node_of, split_pair_id
from meshtui.protocol import messages, wire
from meshtui.protocol.messages import CheckConsumer, CheckProvider, CheckRequest

if TYPE_CHECKING:
    from meshtui.controller.reach import Reach

CLOCK_LIMIT_S = wire.MAX_SKEW_S / 2
"""A node whose clock is further off than this is reported: two such nodes may already be a
whole signing window apart, and every signed message between them would be refused."""
CHECK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Problem:
    """One problem: on which node, which check, about what, what is wrong, what to do."""

    node: str
    check: str  # key, reach, clock, folder, owner, group, reload, admin-file, admin-rights, port,
    # policy, file (a credential file), secret-file (a module's own secret file), overlap,
    # controller
    subject: str
    problem: str
    fix: str


@dataclass(frozen=True)
class NodeCheck:
    """How one node answered: whether it did, its clock's offset, how many checks passed."""

    node: str
    answered: bool
    skew_s: float | None = None
    passed: int = 0
    elapsed_ms: float = 0.0


@dataclass(frozen=True)
class DoctorReport:
    """Every problem found, every node's answer, and how long the whole check took."""

    problems: list[Problem] = field(default_factory=list)
    nodes: list[NodeCheck] = field(default_factory=list)
    elapsed_ms: float = 0.0

    @property
    def ok(self) -> bool:
        """True when nothing needs doing."""
        return not self.problems

    def policy(self) -> DoctorReport:
        """Only what ``declare --check-nodes`` asks: what each node's policy refuses, and the
        nodes that could not say (unreachable, wrong key, clock)."""
        keep = ("policy", "reach", "key", "clock")
        return DoctorReport(
            problems=[p for p in self.problems if p.check in keep],
            nodes=self.nodes,
            elapsed_ms=self.elapsed_ms,
        )

    def to_json(self) -> JsonObject:
        """The report as plain JSON (``doctor --json``)."""
        return {
            "ok": self.ok,
            "problems": [asdict(p) for p in self.problems],
            "nodes": [asdict(n) for n in self.nodes],
            "elapsed_ms": round(self.elapsed_ms, 1),
        }


def requests(
    nodes: Mapping[str, NodeRow],
    modules: Mapping[str, ModuleRow],
    pairs: list[PairRow],
    digests: Mapping[str, list[str]] | None = None,
) -> dict[str, CheckRequest]:
    """What each declared node must check, from the inventory (``digests``: per pair, the
    digest of each of its generations, for the credential file a node holds)."""
    live = [p for p in pairs if not p["withdrawn_at"]]
    consumers: dict[str, list[CheckConsumer]] = {n: [] for n in nodes}
    ports: dict[str, dict[tuple[str, int], list[str]]] = {n: {} for n in nodes}
    owner_of: dict[tuple[str, int], str] = {}
    for p in live:
        node = node_of(p["consumer"])
        if node not in consumers:
            continue
        end: CheckConsumer = {
            "pair": p["id"],
            "file": p["file"],
            "owner": p.get("file_owner"),
            "group": p.get("file_group"),
            "reload": list(p["reload"]),
            "mode": p["file_mode"],
        }
        if digests and p["id"] in digests:
            end["digests"] = digests[p["id"]]
        consumer = modules.get(p["consumer"])
        for need in consumer["spec"].requires if consumer else []:
            same = need.name == p["provision"] and need.file == p["file"]
            if same and need.connection is not None:  # where its file goes, for the policy
                end["connection"] = need.connection.file
            if same and need.format != PASSWORD:  # the password is one line of it
                end["unit"] = need.format
        provider_node = nodes.get(node_of(p["provider"]))
        provider = modules.get(p["provider"])
        offers = provider["spec"].provides if provider else []
        offer = next((o for o in offers if o.name == p["provision"]), None)
        kind = registry.kind_of(offer.kind) if offer is not None else None
        if provider_node is not None and offer is not None and kind is not None and kind.hands_over:
            # its login hands the server the credential: the node's policy must list the server
            end["server"] = {
                "kind": kind.name,
                "host": str(provider_node["address"]),
                "port": int(p["port"]),
                "ca": offer.ca if offer.tls else None,
            }
        consumers[node].append(end)
        if provider_node is not None:
            where = (str(provider_node["address"]), int(p["port"]))
            ports[node].setdefault(where, []).append(p["id"])
            owner_of[where] = p["provider"]
    providers: dict[str, list[CheckProvider]] = {n: [] for n in nodes}
    for mid, m in modules.items():
        spec = m["spec"]
        if not m["declared"] or not spec.provides or m["node"] not in providers:
            continue
        kinds = {registry.kind_of(o.kind) for o in spec.provides}
        kind = next(iter(kinds)) if len(kinds) == 1 else None
        item: CheckProvider = {
            "provider": mid,
            "admin": spec.admin,
            "builtin": is_builtin(spec.provisioner)
            and kind is not None
            and kind.doctor is not None,
            "databases": any(
                p["provider"] == mid and bool(p["values"].get("database")) for p in live
            ),
            "pin": spec.pin,
        }
        if kind is not None and (name := registry.stored_name(kind.name)) is not None:
            item["kind"] = name
        item["provisions"] = [  # for the node's policy: where each manifest and grants go
            {
                "provision": o.name,
                "kind": registry.name_of(o.kind),
                "receives": spec.receives[o.name],
                "grants": spec.grants[o.name],
            }
            for o in spec.provides
            if o.name in spec.receives and o.name in spec.grants
        ]
        item["provisioner"] = spec.provisioner
        providers[m["node"]].append(item)
    return {
        n: {
            "consumers": consumers[n],
            "providers": providers[n],
            "ports": [
                {"host": h, "port": port, "provider": owner_of[(h, port)], "pairs": ids}
                for (h, port), ids in sorted(ports[n].items())
            ],
        }
        for n in nodes
    }


def refusal(node: str, row: NodeRow, exc: AgentError) -> Problem:
    """A node that did not give a trusted answer, in words: wrong key, clock, or unreachable."""
    from meshtui.controller.agents.client import UNSIGNED_REFUSAL  # httpx loads only when asked

    why = exc.reason
    if "off this clock" in why:
        return Problem(
            node,
            "clock",
            node,
            f"clock disagrees beyond the signing window ({why})",
            "synchronise the clocks of the controller and the node (NTP)",
        )
    if "answer not trusted" in why:
        return Problem(
            node,
            "key",
            node,
            f"the agent at {row['agent']} does not answer with the declared key ({why})",
            f"give the declaration this node's own node.pub (keys = ...) and declare again, "
            f"or point agent = at {node}'s agent",
        )
    if "not signed by controller" in why or UNSIGNED_REFUSAL in why:
        return Problem(
            node,
            "key",
            node,
            f"the agent refuses this controller's key ({why})",
            f"when {node}'s policy names controllers ([[controllers]]), add this one there "
            f"(the 'controller' line for {node} gives the entry); else, on {node}: meshtui "
            "host rekey --controller controller.pub (see README, \"If the controller's key is "
            'lost too")',
        )
    if "unknown kind" in why:
        return Problem(
            node, "reach", node, f"the agent is too old for doctor ({why})", "update meshtui there"
        )
    return Problem(
        node,
        "reach",
        node,
        f"the agent does not answer ({why})",
        f"start meshtui host serve on {node}, or fix agent = {row['agent']}",
    )


def pinned_elsewhere(ctl: Reach, node: str, row: NodeRow, exc: AgentError) -> Problem:
    """:func:`refusal`; for a node refusing this controller's key, the key it pins instead
    (read without a key) and the act on the node that changes it (``meshtui host rekey``)."""
    from meshtui.controller.agents.client import UNSIGNED_REFUSAL, read_anchor_answer

    found = refusal(node, row, exc)
    unsigned = UNSIGNED_REFUSAL in exc.reason  # the node's own words were not signed for us
    if "not signed by controller" not in exc.reason and not unsigned:
        return found
    ours = ctl.keys().public().fingerprint()
    try:  # the key it pins, as the node signs it for our fresh nonce
        pinned = read_anchor_answer(row).controller
    except AgentError:
        pinned = None
    if unsigned and (pinned is None or pinned == ours):
        return found  # not shown to be the key: the request may have changed on the way
    pinned = pinned or "another key"
    return Problem(
        node,
        "key",
        node,
        f"still pins controller key {pinned}, not this controller's {ours}: it refuses every "
        "request from here (the old key was lost, or this is another controller)",
        f"on {node}, stop its agent and run: meshtui host rekey --state NODE_STATE "
        "--controller controller.pub --yes (after checking the fingerprint), then start it",
    )


def controllers_not_accepted(ctl: Reach, nodes: Mapping[str, NodeRow]) -> list[Problem]:
    """A node that does not accept a controller this one knows (itself, or another in
    ``controllers/NAME.pub``): named, with the policy entry that would accept it."""
    from meshtui.controller.keys import keyring
    from meshtui.controller.read.accepting import not_accepting

    keys = keyring(ctl.state_dir, ctl.fence.controller)
    return [
        Problem(
            gap.node,
            "controller",
            gap.name,
            f"does not accept controller {gap.name} (key {gap.fingerprint}): {gap.accepts}",
            f'add to {gap.node}\'s policy.toml: [[controllers]] name = "{gap.name}", '
            f'verify = "{crypto.b64(keys.keys[gap.name])}" (and one for every controller '
            "it should keep accepting), then restart its agent",
        )
        for gap in not_accepting(keys, nodes)
    ]


def digest_key_lacking(ctl: Reach) -> list[Problem]:
    """Each controller this one knows (itself, or ``controllers/NAME.pub``) that holds no copy
    of the mesh's digest key, once some controller holds it: it would read every own secret as
    written outside meshtui."""
    from meshtui.controller.keys import keyring

    held = ctl.inventory.digest_keys()
    if not held:
        return []
    return [
        Problem(
            "inventory",
            "digest-key",
            name,
            f"controller {name} holds no copy of the mesh's digest key (held by "
            f"{', '.join(sorted(held))}): it cannot digest a module's own secrets",
            f"on {', '.join(sorted(held))}: meshtui push, or meshtui secret share-key {name}",
        )
        for name in keyring(ctl.state_dir, ctl.fence.controller).besides(held)
    ]


def provider_files(
    ctl: Reach, agents_for: Mapping[str, NodeRow], answered: set[str]
) -> list[Problem]:
    """Each provider's secret file its node says is not what the agent wrote there: changed,
    gone, world-readable, another owner (a pair not delivered yet is push's)."""
    from meshtui.controller.plan.resolve import ask_state

    modules = ctl.inventory.modules()
    providers = {node_of(m) for m, r in modules.items() if r["spec"].provides}
    if not providers & answered:
        return []
    with ctl.agents(timeout=CHECK_TIMEOUT_S, nodes=agents_for) as agents:
        _, holdings = ask_state(agents, sorted(providers & answered))
    out: list[Problem] = []
    for node, held in sorted(holdings.items()):
        for h in held:
            if h["end"] != End.PROVIDER or "file" not in h:
                continue
            found = h.get("error") or "; ".join(h.get("unlike", []))
            if not found and not h.get("present", True):
                found = f"{h['file']} does not hold the credential delivered (changed, or gone)"
            if found:
                out.append(
                    Problem(node, "file", h["pair"], found, "meshtui push writes it again (0600)")
                )
    return out


def secret_files(
    ctl: Reach, agents_for: Mapping[str, NodeRow], answered: set[str]
) -> list[Problem]:
    """Each module's own secret file its node says is not what the agent wrote there: changed,
    gone, world-readable, another owner or group (a file not delivered yet is push's)."""
    from meshtui.controller.act import own_secrets
    from meshtui.controller.read.secret_states import declared

    found = declared(ctl.inventory)
    rows = ctl.inventory.own_secrets()
    wanted = {
        d.key: d.spec.file
        for d in found
        if d.pair is not None and (row := rows.get(d.key)) is not None and row["file_version"]
    }
    nodes = sorted({node_of(m) for m, _ in wanted} & answered)
    if not nodes:
        return []
    with ctl.agents(timeout=CHECK_TIMEOUT_S, nodes=agents_for) as agents:
        held = own_secrets.held_files(agents, nodes)
    return [
        Problem(
            node,
            "secret-file",
            f"{h['module']} {h['name']}",
            why,
            "meshtui push writes it again as declared (from the vault)",
        )
        for node, files in sorted(held.items())
        for h in files
        if wanted.get((h["module"], h["name"])) == h["file"]
        and (why := own_secrets.file_problem(h)) is not None
    ]


def open_overlaps(ctl: Reach) -> list[Problem]:
    """Each pair whose overlap rotation could not be closed: both credentials may be accepted
    at its provider until a push removes the old one."""
    return [
        Problem(
            node_of(split_pair_id(pid)[2]),
            "overlap",
            pid,
            said,
            "meshtui push (once the provider's node answers) removes the old credential",
        )
        for pid, said in sorted(overlaps(ctl.inventory).items())
    ]


def doctor(ctl: Reach, progress: Progress) -> DoctorReport:
    """Ask every declared node to check its part; judge keys and clocks here."""
    started = time.monotonic()
    inv = ctl.inventory
    nodes = {n: r for n, r in inv.nodes().items() if r["declared"]}
    digests: dict[str, list[str]] = {}
    for pid, digest in inv.generation_by_digest():
        digests.setdefault(pid, []).append(digest)
    asks = requests(nodes, inv.modules(), inv.pairs(), digests)
    progress(f"checking {len(asks)} nodes", 0, len(asks))
    sent = time.time()
    with ctl.agents(timeout=CHECK_TIMEOUT_S, nodes=nodes) as agents:
        answers = agents.call_many(messages.CHECK, asks)
    back = time.time()
    problems: list[Problem] = []
    checked: list[NodeCheck] = []
    for node in sorted(answers):
        answer = answers[node]
        if isinstance(answer, AgentError):
            problems.append(pinned_elsewhere(ctl, node, nodes[node], answer))
            checked.append(NodeCheck(node, answered=False))
            continue
        found = answer  # its shape was checked on receipt (client.py)
        if found["node"] != node:
            problems.append(
                Problem(
                    node,
                    "key",
                    node,
                    f"the agent says it is {found['node']!r}",
                    f"point agent = at {node}'s own agent",
                )
            )
        skew = found["at"] - (sent + back) / 2
        if abs(skew) > CLOCK_LIMIT_S + (back - sent) / 2:
            problems.append(
                Problem(
                    node,
                    "clock",
                    node,
                    f"clock is {skew:+.1f} s off the controller's (limit ±{CLOCK_LIMIT_S:.0f} s; "
                    f"messages are refused past ±{wire.MAX_SKEW_S:.0f} s)",
                    "synchronise the clocks of the controller and the node (NTP)",
                )
            )
        problems += [
            Problem(node, f["check"], f["subject"], f["problem"], f["fix"])
            for f in found["findings"]
        ]
        checked.append(NodeCheck(node, True, round(skew, 3), found["passed"], found["elapsed_ms"]))
    answered = {n.node for n in checked if n.answered}
    problems += open_overlaps(ctl)
    problems += controllers_not_accepted(ctl, nodes)
    problems += digest_key_lacking(ctl)
    problems += provider_files(ctl, nodes, answered)
    problems += secret_files(ctl, nodes, answered)
    progress("checked", len(asks), len(asks))
    return DoctorReport(
        problems=problems, nodes=checked, elapsed_ms=(time.monotonic() - started) * 1000
    )
