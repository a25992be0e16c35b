"""Session state on its own branch (``[sessions] branch``, default ``expgit/sessions``).

Files on the branch (all JSON, all redacted, no identifier in the clear):

* ``sessions/<ab>/<session key>.json``: the :class:`SessionManifest`;
* ``transcripts/<ab>/<session key>.json``: the session's normalised, redacted messages
  (what segmentation reads; the source file is never read again);
* ``segments/<ab>/<fingerprint>.json``: one segment's messages (content-addressed: a
  segment seen in two sessions is stored once).

``<ab>`` is the first two characters of the name: the folders are fanned out
(:func:`~expgit.store.sidebranch.fanned`), so a commit never rewrites a tree of every
session.

Writes go through :class:`~expgit.store.sidebranch.SideBranch` (objects, then a compare-and-
swap of the branch). A save names the manifests it was computed from; if another writer
changed one of them meanwhile, the save is refused (ConflictError) instead of losing
that writer's update.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import TypeAdapter, ValidationError

from expgit.core.domain import Message
from expgit.errors import ConflictError, InvalidInputError, NotFoundError
from expgit.sessions.manifest import SessionManifest
from expgit.store.repository import ExperienceRepository
from expgit.store.sidebranch import SideBranch, fanned

MANIFESTS = "sessions"
TRANSCRIPTS = "transcripts"
SEGMENTS = "segments"
KIND_TRAILER = ("Expgit-Kind", "sessions")

_MESSAGES = TypeAdapter(list[Message])


def encode_messages(messages: Sequence[Message]) -> bytes:
    return _MESSAGES.dump_json(list(messages), indent=1) + b"\n"


def encode_manifest(manifest: SessionManifest) -> bytes:
    return manifest.model_dump_json(indent=1).encode("utf-8") + b"\n"


@dataclass
class SessionChanges:
    """One save: manifests (with the manifest JSON each was computed from, None for a
    new session), transcripts by session key, segment messages by fingerprint."""

    manifests: dict[str, SessionManifest] = field(default_factory=dict)
    bases: dict[str, bytes | None] = field(default_factory=dict)
    transcripts: dict[str, list[Message]] = field(default_factory=dict)
    segments: dict[str, list[Message]] = field(default_factory=dict)

    def put(self, manifest: SessionManifest, base: bytes | None) -> None:
        self.manifests[manifest.session_key] = manifest
        self.bases.setdefault(manifest.session_key, base)

    def __bool__(self) -> bool:
        return bool(self.manifests or self.transcripts or self.segments)


class SessionStore:
    """Reads and writes the session hub's records on the sessions branch."""

    def __init__(self, repo: ExperienceRepository) -> None:
        self.repo = repo
        # a clone with a work tree may hold the branch only as origin's: read that one
        self.branch = SideBranch(repo, repo.settings.sessions.branch, what="session records",
                                 tracking=True)

    # ------------------------------------------------------------------ reads
    @staticmethod
    def path_of(folder: str, name: str) -> str:
        """Where the record ``name`` of ``folder`` is written (the one path function of
        this store)."""
        return fanned(folder, f"{name}.json")

    def manifests(self) -> list[SessionManifest]:
        """Every session's manifest, by session key."""
        return [manifest for manifest, _ in self.manifest_entries()]

    def manifest_entries(self) -> list[tuple[SessionManifest, bytes]]:
        """Every manifest with the bytes it was read from (the base of a later save)."""
        return [(self.parse(name, data), data)
                for name, data in self.branch.files(MANIFESTS, fanned_out=True).items()
                if name.endswith(".json")]

    def manifest(self, session_key: str) -> SessionManifest | None:
        data = self.manifest_bytes(session_key)
        return None if data is None else self.parse(f"{session_key}.json", data)

    def manifest_bytes(self, session_key: str) -> bytes | None:
        return self.branch.read_in(MANIFESTS, f"{session_key}.json")

    def parse(self, name: str, data: bytes) -> SessionManifest:
        """The manifest file ``name`` holding ``data``; InvalidInputError if it is not one."""
        try:
            return SessionManifest.model_validate_json(data)
        except ValidationError as exc:
            raise InvalidInputError(
                f"{self.branch.branch}:{MANIFESTS}/{name}: not a valid session manifest: "
                f"{exc.errors()[0]['msg']}") from None

    def _messages(self, folder: str, name: str, what: str) -> list[Message]:
        path = self.path_of(folder, name)
        data = self.branch.read_in(folder, f"{name}.json")
        if data is None:
            raise NotFoundError(f"no {what} ({self.branch.branch}:{path})",
                                hint="ingest the session with `expgit sessions ingest`")
        try:
            return _MESSAGES.validate_json(data)
        except ValidationError as exc:
            raise InvalidInputError(f"{self.branch.branch}:{path}: not valid messages: "
                                    f"{exc.errors()[0]['msg']}") from None

    def segment_messages(self, fingerprint: str) -> list[Message]:
        """The (redacted) messages of the segment with this fingerprint."""
        return self._messages(SEGMENTS, fingerprint, f"segment {fingerprint}")

    def transcript(self, session_key: str) -> list[Message]:
        """The (redacted) messages of a whole session."""
        return self._messages(TRANSCRIPTS, session_key,
                              f"transcript of session {session_key}")

    # ----------------------------------------------------------------- writes
    def save(self, changes: SessionChanges, subject: str) -> str | None:
        """Commit ``changes``; the new tip, or None when nothing changed. ConflictError
        when a manifest changed since it was read (another run is working on it)."""
        if not changes:
            return None
        records: list[tuple[str, str, bytes]] = []
        for key, manifest in changes.manifests.items():
            manifest.refresh_status()
            records.append((MANIFESTS, key, encode_manifest(manifest)))
        records += [(TRANSCRIPTS, key, encode_messages(messages))
                    for key, messages in changes.transcripts.items()]
        records += [(SEGMENTS, fingerprint, encode_messages(messages))
                    for fingerprint, messages in changes.segments.items()]

        def at(tip: str | None) -> Mapping[str, bytes | None]:
            for key, base in changes.bases.items():
                now = self.branch.read_in(MANIFESTS, f"{key}.json", tip=tip) if tip else None
                if now != base:
                    raise ConflictError(f"session {key} was changed by another run "
                                        "meanwhile; nothing was written",
                                        hint="run the command again")
            files: dict[str, bytes | None] = {}
            for folder, name, data in records:
                files[self.path_of(folder, name)] = data
            return files

        return self.branch.write(at, subject, trailers=(KIND_TRAILER,))

    def patch(self, patches: Mapping[str, Sequence[Callable[[SessionManifest], None]]],
              subject: str) -> str | None:
        """Apply each session's functions, in order, to its manifest as the branch tip has
        it (re-read on every attempt: concurrent updates of other fields are kept) and
        commit; the new tip, or None when nothing changed. A session that is gone is
        skipped."""

        def at(tip: str | None) -> Mapping[str, bytes | None]:
            files: dict[str, bytes | None] = {}
            for key, changes in patches.items():
                data = self.branch.read_in(MANIFESTS, f"{key}.json", tip=tip) if tip else None
                if data is None:
                    continue
                manifest = self.parse(f"{key}.json", data)
                for change in changes:
                    change(manifest)
                manifest.refresh_status()
                new = encode_manifest(manifest)
                if new != data:
                    files[self.path_of(MANIFESTS, key)] = new
            return files

        if not patches:
            return None
        return self.branch.write(at, subject, trailers=(KIND_TRAILER,))
