"""Every error meshtui raises, in one hierarchy, so one place can turn them into messages.

    MeshtuiError                 base; ``exit_code`` is what the CLI returns for it
    ├── InputError               bad input from the operator (exit 2)
    │   ├── DeclarationError     a declaration that cannot be used: names the file, key and fix
    │   ├── UnknownKindError     a provider kind that is not registered (names the known ones)
    │   ├── KeyFileError         a missing or unreadable key file
    │   ├── PolicyFileError      a node policy file that cannot be used: names the file, key and fix
    │   ├── UnknownPairError     a pair id, node or module that the inventory does not know
    │   ├── StateFolderError     a command that changes things, on a folder with no controller key
    │   └── ForeignStateFolderError  a state folder another user owns or may write
    ├── InventoryError           the SQLite store cannot do what was asked
    │   ├── ReadOnlyError        a write was attempted on an inventory opened read-only
    │   │   └── ReadOnlyContactError  a read-only controller was asked to reach an agent
    │   └── DamagedInventoryError the file is truncated or corrupted: names it, points to restore
    ├── CryptoError              a sealed blob or signature did not check out
    │   ├── BackupError          a backup that cannot be written, opened or restored
    │   ├── UnsealError          a sealed blob could not be opened with this node's key
    │   └── SignatureError       an envelope or report was not signed by the expected key
    ├── WireError                a message between controller and agent was refused
    │   ├── EnvelopeError        bad signature, stale clock, replayed nonce, wrong recipient
    │   └── MessageError         a payload that does not have its kind's shape (names the field)
    ├── AgentError               a host agent could not be reached or did not do the work
    ├── ChannelError             an agent's HTTP answer not readable (also an OSError)
    ├── HostFileError            a node's file or folder the agent must not trust or cannot use
    │   └── CAFileError          a CA file root will not trust (also an OSError)
    ├── PolicyRefusal            a delivered item the node's policy does not allow (that end only)
    ├── RotationError            a rotation could not start or finish
    │   ├── NotResolvedError     an affected node did not answer or prove its identity
    │   ├── RotationBusyError    a push, rotation or drill already holds the state folder
    │   └── LeaseLostError       this controller's turn (lease, epoch) ended before its write
    ├── ManifestError            a manifest (mesh.json) that cannot be read or is invalid
    ├── ProvisionError           the provisioner could not reconcile
    │   └── UnsafeLoginError     a login the provisioner refuses to create (too long, NUL, ...)
    └── LabError                 the lab (embedded PostgreSQL, namespaces) could not be built

No message ever contains a secret: constructors take names and reasons, never credentials.
"""

from __future__ import annotations


class MeshtuiError(Exception):
    """Base of every meshtui error; ``exit_code`` is the CLI's exit status for it."""

    exit_code = 1


class InputError(MeshtuiError):
    """The operator gave something meshtui cannot use; nothing was changed."""

    exit_code = 2


class DeclarationError(InputError):
    """A declaration problem, reported as ``file: key: problem (fix)``."""

    def __init__(self, file: str, key: str, problem: str, fix: str = "") -> None:
        self.file, self.key, self.problem, self.fix = file, key, problem, fix
        where = f"{file}: {key}: " if key else f"{file}: "
        super().__init__(where + problem + (f" ({fix})" if fix else ""))


class UnknownKindError(InputError):
    """A provider kind that is not registered (meshtui.kinds.registry); names the known ones."""

    def __init__(self, name: object, known: tuple[str, ...]) -> None:
        self.name, self.known = name, known
        super().__init__(f"{name!r} is not a provider kind; the known kinds are {', '.join(known)}")


class KeyFileError(InputError):
    """A key file is missing, unreadable or malformed."""


class PolicyFileError(InputError):
    """A node policy file that is missing, unsafe or malformed: ``file: key: problem (fix)``;
    the agent refuses to start with it."""

    def __init__(self, file: str, key: str, problem: str, fix: str = "") -> None:
        self.file, self.key, self.problem, self.fix = file, key, problem, fix
        where = f"{file}: {key}: " if key else f"{file}: "
        super().__init__(where + problem + (f" ({fix})" if fix else ""))


class UnknownPairError(InputError):
    """A pair, node or module named on the command line is not in the inventory."""


class StateFolderError(InputError):
    """The state folder holds no controller key: a mistyped or missing ``--state``, most often."""

    def __init__(self, folder: str) -> None:
        super().__init__(
            f"{folder}: no controller key here ({folder}/controller.key), so this is not a "
            "controller's state folder; nothing was created. Name yours with --state DIR or "
            "MESHTUI_STATE=DIR (the README's is /var/lib/meshtui/controller); only for a new "
            "controller, run meshtui --state DIR init"
        )


class ForeignStateFolderError(InputError):
    """The state folder is another user's (or others may write it): its owner could put a link
    where the command opens a file, and the command would write through it with its rights."""

    def __init__(self, folder: str, owner: str, me: str, writable: bool) -> None:
        why = (
            f"is owned by {owner}, and this command runs as {me}"
            if not writable
            else "can be written by other users"
        )
        super().__init__(
            f"{folder} {why}: a command works only in a state folder its own user owns and "
            f"nobody else may write, since the folder's owner could put a link where it opens "
            f"a file. Run it as the folder's owner (sudo -u {owner} meshtui --state {folder} "
            f"...), or chmod go-w {folder}; nothing was done"
        )


class UntrustedPathError(InputError):
    """A folder root would work in can be redirected by another user: a link of theirs, a
    folder of theirs, or an entry of a world-writable folder without the sticky bit."""


class InventoryError(MeshtuiError):
    """The inventory cannot be opened or does not hold what was asked."""


class DamagedInventoryError(InventoryError):
    """The inventory file is truncated or corrupted; nothing was written to it."""


class ReadOnlyError(InventoryError):
    """A write was attempted where the inventory is read-only."""

    def __init__(self, action: str = "this action") -> None:
        super().__init__(
            f"{action} changes the inventory, but it is open read-only "
            "(drop --read-only, or use a state folder you may write)"
        )


class ReadOnlyContactError(ReadOnlyError):
    """A read-only controller was asked to do something that would send a request to an agent.

    Refused before the controller's key is read: read-only means no key and no contact."""

    def __init__(self, action: str, nodes: list[str]) -> None:
        InventoryError.__init__(
            self,
            f"read-only: {action} would contact {', '.join(nodes) or 'an agent'}; this "
            "controller is open read-only and never loads its key, so nothing was sent "
            "(drop --read-only to do it)",
        )


class CryptoError(MeshtuiError):
    """A cryptographic check failed."""


class BackupError(CryptoError):
    """A backup cannot be written, or opened (wrong passphrase, truncated, tampered), or
    restored (a state folder that is not empty); nothing was written."""

    exit_code = 2


class UnsealError(CryptoError):
    """A sealed blob could not be opened with this node's key."""


class SignatureError(CryptoError):
    """A signature did not verify against the expected key."""


class DigestKeyError(CryptoError):
    """This controller cannot open the mesh's digest key (it holds no copy, or its copy does
    not verify or open): the message names the controller and what to run; nothing was
    digested with another key instead."""


class WireError(MeshtuiError):
    """A controller/agent message was refused."""


class EnvelopeError(WireError):
    """A signed envelope was refused: wrong key, stale, replayed or for another node."""


class OffClockError(EnvelopeError):
    """An envelope signed by the right key whose time is off this clock. It was authenticated,
    so an answer may quote its ``nonce`` (any other refusal is answered unsigned)."""

    def __init__(self, text: str, nonce: str) -> None:
        super().__init__(text)
        self.nonce = nonce


class FencedError(WireError):
    """A delivering request under an epoch below the highest this node accepted: its controller
    lost its turn (another took the lease since), so the node does nothing it asks."""

    def __init__(
        self,
        node: str,
        controller: str,
        epoch: int,
        highest: int,
        by: str | None = None,
        at: float | None = None,
    ) -> None:
        self.node, self.controller, self.epoch, self.highest = node, controller, epoch, highest
        self.at = at
        """When this node first accepted ``highest`` (its clock; None: it does not know)."""
        if epoch < highest:
            why = (
                f"controller {controller}'s epoch {epoch} is behind epoch {highest} this node "
                f"({node}) accepted: another controller leads"
            )
        else:  # one epoch, two holders: the lease's database lost a holding (a switch)
            why = (
                f"controller {controller}'s epoch {epoch} was already taken on this node "
                f"({node}) by controller {by}: the lease's database does not know that holding "
                "(a switch to a standby that had not received it?)"
            )
        super().__init__(
            f"refused: {why}; nothing was done (this controller delivers again once it holds "
            "the lease under a higher epoch)"
        )


class MessageError(WireError):
    """A request or answer payload does not have its kind's shape; names the field's path."""


class AgentError(MeshtuiError):
    """A host agent could not be reached or failed to do its part."""

    def __init__(self, node: str, reason: str) -> None:
        self.node, self.reason = node, reason
        super().__init__(f"node {node}: {reason}")


class FencedOutError(AgentError):
    """A node refused a delivering request for its epoch (:class:`FencedError` on the node):
    another controller leads, and this one must stop delivering; ``highest``: the epoch the
    node holds, when it said."""

    def __init__(self, node: str, reason: str, highest: int | None = None) -> None:
        super().__init__(node, reason)
        self.highest = highest


class ChannelError(MeshtuiError, OSError):
    """An agent's answer could not be read: not HTTP, too large, or cut short. Also an
    ``OSError``, as a connection's failure is: the caller turns either into an AgentError."""


class HostFileError(MeshtuiError):
    """A file or folder on a node that the agent refuses to use: a link, a FIFO, another
    user's folder, a folder others can write, an unknown owner. Nothing was written."""


class CAFileError(HostFileError, OSError):
    """A CA file root will not trust: not a regular file of root's in checked folders, or too
    large. Also an ``OSError``, as a CA file that cannot be read is, for the TLS callers."""


class PolicyRefusal(MeshtuiError):
    """A delivered item asks for something this node's policy does not allow. Its message names
    the node, the module, the declaration's key and the policy entry that would allow it;
    nothing of that end is written or run."""

    def __init__(self, node: str, module: str, key: str, problem: str, allow: str) -> None:
        self.node, self.module, self.key, self.problem, self.allow = (
            node,
            module,
            key,
            problem,
            allow,
        )
        super().__init__(f"node {node}: {module}: {key}: {problem}; to allow it, {allow}")


class RotationError(MeshtuiError):
    """A rotation could not start or finish."""


class NotResolvedError(RotationError):
    """Some affected nodes did not answer or prove their identity; nothing was minted."""

    def __init__(self, reasons: dict[str, str]) -> None:
        self.reasons = dict(reasons)
        listed = "; ".join(f"{node}: {why}" for node, why in sorted(reasons.items()))
        super().__init__(
            f"not rotated, nothing was minted or sent: {listed} "
            "(bring the node's agent back, then rotate again)"
        )


class ProviderRefusedError(NotResolvedError):
    """A rotated pair's provider's provisioner cannot work with its admin file (an expired
    token, a changed admin password): asked before anything is minted, so nothing changed."""

    def __init__(self, reasons: dict[str, str]) -> None:
        RotationError.__init__(
            self,
            "not rotated, nothing was minted or sent: "
            + "; ".join(f"{who}: {why}" for who, why in sorted(reasons.items()))
            + " (fix the provider's admin file as it says, then rotate again)",
        )
        self.reasons = dict(reasons)


class RotationBusyError(RotationError):
    """A push, rotation or drill already delivers from this state folder (or one was interrupted)."""


class LeaseLostError(RotationError):
    """This controller's turn ended (its lease ran out or another controller took it over)
    before a delivering write: the write is refused and the action stops before its next send."""

    def __init__(self, *, controller: str, epoch: int, turn: str, after: str) -> None:
        self.controller, self.epoch, self.turn = controller, epoch, turn
        super().__init__(
            f"controller {controller} no longer holds the {turn} turn (epoch {epoch}): {after}; "
            "nothing more is written or sent by it; a rotation it journaled is finished or "
            "rolled back by the next holder (meshtui status and meshtui audit say which): run "
            "the action again only once they show it was not done"
        )


class ManifestError(MeshtuiError):
    """A manifest cannot be read or is invalid; nothing was changed."""


class ProvisionError(MeshtuiError):
    """The provisioner could not reconcile its software."""


class UnsafeLoginError(ProvisionError):
    """A login name the provisioner refuses to create."""


class LabError(MeshtuiError):
    """The lab could not be built or taken down."""
