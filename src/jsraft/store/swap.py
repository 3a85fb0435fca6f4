"""A replacement store built beside the live one, verified, then swapped in atomically (layer L2).

Owns: the directory steps of DESIGN §8's "fresh store" repair, so a failed or interrupted repair never
leaves less than there was. A repair whose store cut its head beyond the group's needs an empty store to
refill; it is built in a sibling directory `<live>.repair-<n>/` while the live store stays on disk, open
and readable. Only once the build verified is it sealed and swapped in:

  1. seal:   the build's files are fsynced, then `SEALED` (the state tuple it verified) is written
             atomically inside it — from here on the build is the one recovery completes a swap with;
  2. aside:  rename `<live>` to `<live>.old`;
  3. in:     rename the build to `<live>`;
  4. fsync the parent directory (both renames durable together);
  5. clean:  remove `<live>.old` and the `SEALED` marker, fsync the parent.

`recover_swap`, called before the live store is opened, finishes or undoes whatever a crash interrupted:

  | found on disk                                  | recovery                                         |
  |------------------------------------------------|--------------------------------------------------|
  | `<live>.old` and `<live>`                      | the swap reached step 3: remove `<live>.old`      |
  | `<live>.old`, no `<live>`, a sealed build      | complete: the build to `<live>`, remove the .old  |
  | `<live>.old`, no `<live>`, no sealed build     | roll back: rename `<live>.old` to `<live>`        |
  | a build directory left over (sealed or not)    | removed (the swap never started: the old stays)   |

`BesideBuild` carries one repair's build for the caller (production's `RepairWorker` and the simulator's
stream repair run the same object): `start` opens an empty store in a new build directory and keeps the
old store open, `abandon` removes the build and hands the old store back, `install` seals, swaps and
reopens the new store at the live path.

Invariants:
  1. At every point of a swap, a crash recovers to exactly one of the old or the new store, never to
     neither and never to a mix: the only state with both names moved aside is completed with a sealed
     build or rolled back without one.
  2. A build is sealed only after its files are durable, and swapped only once sealed.
  3. At most one build exists beside a live store: a new build first recovers (removing leftovers).
  4. The old store stays untouched and open until `install` closes it, right before the swap.

Imports: stdlib, L0 (`errors`), L1 (`disk`), `store` siblings. Never trio, time or the stream layer.
Reference: DESIGN.md §3 (file replacement), §8 (repair).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Any

from jsraft.disk.base import Disk
from jsraft.errors import invariant

OLD_SUFFIX = ".old"
BUILD_INFIX = ".repair-"
SEALED = "SEALED"
SWAP_STEPS = ("seal", "aside", "in", "sync", "clean")

StepHook = Callable[[str], None]


def _parent(live: str) -> str:
    return posixpath.dirname(live)


def _builds(disk: Disk, live: str) -> list[str]:
    """The build directories beside `live`, oldest (lowest number) first."""
    parent, base = _parent(live), posixpath.basename(live)
    try:
        names = disk.listdir(parent)
    except (FileNotFoundError, NotADirectoryError):  # nothing created here yet
        return []
    numbered = []
    for name in names:
        suffix = name[len(base) + len(BUILD_INFIX):]
        if name.startswith(base + BUILD_INFIX) and suffix.isdigit():
            numbered.append((int(suffix), posixpath.join(parent, name)))
    return [path for _, path in sorted(numbered)]


def is_sealed(disk: Disk, build: str) -> bool:
    return disk.exists(posixpath.join(build, SEALED))


def recovered_path(disk: Disk, live: str) -> str:
    """Where the store `recover_swap` would leave at `live` lies now: for a read-only open, which must
    not finish the recovery itself."""
    if disk.exists(live + OLD_SUFFIX) and not disk.exists(live):
        sealed = [build for build in _builds(disk, live) if is_sealed(disk, build)]
        return sealed[-1] if sealed else live + OLD_SUFFIX
    return live


def recover_swap(disk: Disk, live: str) -> str:
    """The recovery table of the module docstring; what it did ("" when there was nothing to do)."""
    old, builds = live + OLD_SUFFIX, _builds(disk, live)
    done = ""
    if disk.exists(old):
        if disk.exists(live):
            disk.remove_tree(old)
            done = "completed"
        else:
            sealed = [build for build in builds if is_sealed(disk, build)]
            if sealed:
                disk.rename(sealed[-1], live)
                builds.remove(sealed[-1])
                disk.sync_dir(_parent(live))  # the new store in place before the old one goes
                disk.remove_tree(old)
                done = "completed"
            else:
                disk.rename(old, live)
                done = "rolled back"
    for build in builds:
        disk.remove_tree(build)
        done = done or "removed a build"
    marker = posixpath.join(live, SEALED)
    if disk.exists(marker):
        disk.remove(marker)
        done = done or "completed"
    if done:
        disk.sync_dir(_parent(live))
    return done


def begin_build(disk: Disk, live: str) -> str:
    """A new, empty build directory beside `live` (invariant 3: leftovers recovered first)."""
    recover_swap(disk, live)
    number = 1
    while disk.exists(f"{live}{BUILD_INFIX}{number}"):  # none after recovery; bounded by that
        number += 1
    build = f"{live}{BUILD_INFIX}{number}"
    disk.makedirs(build)
    disk.sync_dir(_parent(live))
    return build


def abandon_build(disk: Disk, build: str) -> None:
    """Remove a build that will not be swapped in (the repair failed or was replaced)."""
    if disk.exists(build):
        disk.remove_tree(build)
        disk.sync_dir(_parent(build))


def seal_build(disk: Disk, build: str, verified: bytes) -> None:
    """Step 1 (invariant 2): the build's files durable, then its `SEALED` marker."""
    invariant(disk.is_dir(build), f"a build to seal exists: {build}")
    disk.sync_tree(build)
    disk.write_atomic(posixpath.join(build, SEALED), verified)


def swap_in(disk: Disk, live: str, build: str, *, step: StepHook | None = None) -> None:
    """Steps 2–5 on a sealed build. `step(name)` is called after each step (tests crash there)."""
    invariant(is_sealed(disk, build), "only a sealed build is swapped in")
    old, parent = live + OLD_SUFFIX, _parent(live)
    if disk.exists(live):
        disk.rename(live, old)
    _note(step, "aside")
    disk.rename(build, live)
    _note(step, "in")
    disk.sync_dir(parent)
    _note(step, "sync")
    if disk.exists(old):
        disk.remove_tree(old)
    disk.remove(posixpath.join(live, SEALED))
    disk.sync_dir(parent)
    _note(step, "clean")


def _note(step: StepHook | None, name: str) -> None:
    if step is not None:
        step(name)


class BesideBuild:
    """One repair's replacement store, built beside the live one (the module docstring).

    `open_store(disk, path)` opens (creating) a store at `path` of `disk`; the caller says how (limits,
    index use), so production and the simulator open exactly as they open the live store.
    """

    def __init__(self, disk: Disk, live: str, open_store: Callable[[Disk, str], Any]) -> None:
        self.disk, self.live, self.open_store = disk, live, open_store
        self.old: Any = None  # the live store, open and untouched while a build runs (invariant 4)
        self.build = ""
        self.store: Any = None  # the store being built

    @property
    def active(self) -> bool:
        return self.old is not None

    def start(self, current: Any) -> Any:
        """An empty store in a new build directory. `current` is the machine's store now: the live one,
        or (a second reset within one repair) the previous build, which is dropped for the new one."""
        if self.active:
            invariant(current is self.store, "a restarted build replaces the build, not the live store")
            self._drop_build()
        else:
            self.old = current
        self.build = begin_build(self.disk, self.live)
        self.store = self.open_store(self.disk, self.build)
        return self.store

    def abandon(self) -> Any:
        """The repair will not finish with this build: remove it; the old store, still open, is returned."""
        invariant(self.active, "a build to abandon was started")
        self._drop_build()
        old, self.old = self.old, None
        return old

    def install(self, verified: bytes, *, step: StepHook | None = None) -> Any:
        """The build verified: seal it, swap it in, and return the new store reopened at the live path."""
        invariant(self.active and self.store is not None, "a build to install was started")
        self.store.sync()
        self.store.close()
        self.old.close()
        seal_build(self.disk, self.build, verified)
        _note(step, "seal")
        swap_in(self.disk, self.live, self.build, step=step)
        self.old = self.store = None
        self.build = ""
        return self.open_store(self.disk, self.live)

    def _drop_build(self) -> None:
        if self.store is not None:
            self.store.close()
        abandon_build(self.disk, self.build)
        self.store, self.build = None, ""
