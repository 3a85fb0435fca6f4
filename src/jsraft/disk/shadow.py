"""Shadow-disk mode: record what is durable, so a power cut can be replayed after `SIGKILL`.

A process killed with `SIGKILL` loses nothing from the page cache, so killing a node does not test what
a power failure does. In shadow mode `OsDisk` reports every write, fsync and namespace change to a
`ShadowTracker`, which keeps, beside the data directory (in `<root>.shadow/`):

  - `ino/<n>`: the content of file *n* as of its last fsync (only the byte ranges written since the
    previous fsync are copied, so an append-only file costs what was appended). An fsync covers what every
    descriptor of the file wrote: the copy goes to the file's size at the fsync (not the syncing handle's,
    which may have been opened before another handle's appends), and it takes whatever the file grew by
    since the last copy even when the write's report has not arrived yet (another thread's);
  - `state.json`: the live name → number map (files and directories are numbered like inodes), and
    for each directory number the entries it held at its last directory fsync.

`power_cut(root, mode, seed)`, called by a harness after the process is dead, rewrites the directory to
what a machine that lost power would show:

  - names: exactly the durable directory entries (an unsynced create, rename or remove is undone);
  - content, by `mode`: `drop` keeps only fsynced bytes; `torn` also keeps a random prefix of each
    file's unsynced change; `pages` keeps or loses each unsynced 4 KiB page independently (a lost page
    beyond the durable length reads back as zeros, as on a file system with delayed allocation).

Invariant: everything made durable by `DiskFile.sync()` plus `Disk.sync_dir()` before the cut is
present, byte for byte, after `power_cut` in every mode.

After the cut the shadow directory is removed; the next tracker for that root starts from the rolled-back
state, which is then entirely durable.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading

POWER_CUT_MODES = ("drop", "torn", "pages")
_PAGE_BYTES = 4096
_ROOT = 0  # the number of the root directory

_trackers: dict[str, "ShadowTracker"] = {}
_trackers_lock = threading.Lock()


def tracker_for(root: str) -> "ShadowTracker":
    """One tracker per root per process, so every `OsDisk` on a root shares what it records."""
    root = os.path.abspath(root)
    with _trackers_lock:
        tracker = _trackers.get(root)
        if tracker is None:
            tracker = ShadowTracker(root)
            _trackers[root] = tracker
        return tracker


def _forget_tracker(root: str) -> None:
    with _trackers_lock:
        _trackers.pop(os.path.abspath(root), None)


def shadow_dir(root: str) -> str:
    return os.path.abspath(root).rstrip("/") + ".shadow"


def _parent(rel: str) -> str:
    return os.path.dirname(rel)


class ShadowTracker:
    """Records the durable state of every file and directory entry under `root`.

    Files and directories are numbered like inodes, and durability is recorded per number, because
    that is how a file system keeps it: a directory's entries travel with the directory when it is
    renamed, a directory created again at an old path starts empty, and an open file keeps writing to
    the same file after its name changes.
    """

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.dir = shadow_dir(self.root)
        self._lock = threading.Lock()
        self._dirty: dict[int, list[int]] = {}  # file number -> [lo, hi) written since last sync
        # Files whose every write since their last copy this tracker has seen. A file written by an
        # earlier process (killed, its page cache intact) is copied whole at its first sync here:
        # that fsync makes the earlier, unseen writes durable too.
        self._seen: set[int] = set()
        state_path = os.path.join(self.dir, "state.json")
        if os.path.exists(state_path):
            with open(state_path) as handle:
                state = json.load(handle)
            self.names: dict[str, int] = state["names"]
            self.dirs: set[int] = set(state["dirs"])
            self.durable: dict[int, dict[str, int]] = {int(k): v for k, v in state["durable"].items()}
            self.next_number: int = state["next_number"]
        else:
            self._adopt_existing()

    # --- State -----------------------------------------------------------------------------------

    def _adopt_existing(self) -> None:
        """Take everything already under `root` as durable: it is what the last power cut left."""
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(os.path.join(self.dir, "ino"))
        self.names, self.dirs, self.next_number = {}, {_ROOT}, _ROOT + 1
        self.durable = {_ROOT: {}}
        for directory, subdirs, files in os.walk(self.root):
            rel_dir = os.path.relpath(directory, self.root)
            rel_dir = "" if rel_dir == "." else rel_dir
            entries = self.durable[self._number_of_dir(rel_dir)]
            for name in subdirs:
                number = self._new_number()
                self.names[os.path.join(rel_dir, name)] = number
                self.dirs.add(number)
                self.durable[number] = {}
                entries[name] = number
            for name in files:
                rel = os.path.join(rel_dir, name)
                number = self._new_number()
                self.names[rel] = number
                entries[name] = number
                shutil.copyfile(os.path.join(self.root, rel), self._content_path(number))
                self._seen.add(number)
        self._save()

    def _new_number(self) -> int:
        number = self.next_number
        self.next_number += 1
        return number

    def _number_of_dir(self, rel: str) -> int:
        return _ROOT if not rel else self.names[rel]

    def _content_path(self, number: int) -> str:
        return os.path.join(self.dir, "ino", str(number))

    def _save(self) -> None:
        # Written with rename but not fsynced: the tracker only has to survive SIGKILL of this process,
        # and the page cache survives that. The harness, not the kernel, simulates the power loss.
        state = {
            "names": self.names,
            "dirs": sorted(self.dirs),
            "durable": {str(k): v for k, v in self.durable.items()},
            "next_number": self.next_number,
        }
        temp = os.path.join(self.dir, "state.json.tmp")
        with open(temp, "w") as handle:
            json.dump(state, handle)
        os.replace(temp, os.path.join(self.dir, "state.json"))

    def _forget(self, rel: str) -> None:
        """Drop the live names at and below `rel` (the durable entries are untouched)."""
        for name in [k for k in self.names if k == rel or k.startswith(rel + "/")]:
            del self.names[name]

    # --- Hooks called by OsDisk --------------------------------------------------------------------

    def number_of(self, rel: str) -> int | None:
        """The file number behind a live name, or None if the name is not tracked."""
        with self._lock:
            return self.names.get(rel)

    def on_create(self, rel: str) -> int:
        with self._lock:
            number = self._new_number()
            self.names[rel] = number
            self._seen.add(number)
            self._save()
            return number

    def on_mkdir(self, rel: str) -> None:
        with self._lock:
            number = self._new_number()
            self.names[rel] = number
            self.dirs.add(number)
            self.durable[number] = {}  # a new directory is empty, whatever once lived at this path
            self._save()

    def on_write(self, number: int | None, lo: int, hi: int) -> None:
        if number is None:
            return
        with self._lock:
            span = self._dirty.get(number)
            if span is None:
                self._dirty[number] = [lo, hi]
            else:
                span[0] = min(span[0], lo)
                span[1] = max(span[1], hi)

    def on_sync(self, number: int | None, fd: int, size: int) -> None:
        if number is None:
            return
        with self._lock:
            span = self._dirty.pop(number, None)
            if number not in self._seen:
                span = [0, size]
                self._seen.add(number)
            path = self._content_path(number)
            copied = os.path.getsize(path) if os.path.exists(path) else 0
            if size > copied:  # grown since the last copy: an append whose `on_write` has not arrived yet
                span = [min(span[0], copied), max(span[1], size)] if span is not None else [copied, size]
            if span is not None and span[1] > size:  # written past the end this fsync saw: still unsynced
                self._dirty[number] = [max(span[0], size), span[1]]
            mode = "r+b" if os.path.exists(path) else "w+b"
            with open(path, mode) as copy:
                if span is not None and span[0] < size:
                    lo, hi = span[0], min(span[1], size)
                    copy.seek(lo)
                    copy.write(os.pread(fd, hi - lo, lo))
                copy.truncate(size)

    def on_sync_dir(self, rel: str) -> None:
        with self._lock:
            number = _ROOT if not rel else self.names.get(rel)
            if number is None:
                return  # a directory this tracker never saw created: nothing in it is tracked
            full = os.path.join(self.root, rel) if rel else self.root
            entries: dict[str, int] = {}
            for name in os.listdir(full):
                child = self.names.get(os.path.join(rel, name) if rel else name)
                if child is not None:
                    entries[name] = child
            self.durable[number] = entries
            self._save()

    def on_rename(self, src: str, dst: str) -> None:
        if src == dst:
            return
        with self._lock:
            moved = {k: v for k, v in self.names.items() if k == src or k.startswith(src + "/")}
            self._forget(dst)  # whatever the rename replaced is no longer reachable by name
            for old, number in moved.items():
                del self.names[old]
                self.names[dst + old[len(src) :]] = number
            self._save()

    def on_remove(self, rel: str) -> None:
        with self._lock:
            self._forget(rel)
            self._save()


# --- The power cut ------------------------------------------------------------------------------


def _durable_tree(
    durable: dict[str, dict[str, int]], dir_numbers: set[int]
) -> tuple[set[str], dict[str, int]]:
    """Walk durable directory entries from the root: the directories and files that survive."""
    dirs: set[str] = {""}
    files: dict[str, int] = {}
    visited = {_ROOT}  # stale entries of directories moved since their last sync could form a loop
    pending = [("", _ROOT)]
    while pending:
        directory, directory_number = pending.pop()
        for name, number in durable.get(str(directory_number), {}).items():
            rel = os.path.join(directory, name) if directory else name
            if number in dir_numbers:
                if number not in visited:
                    visited.add(number)
                    dirs.add(rel)
                    pending.append((rel, number))
            else:
                files[rel] = number
    return dirs, files


def _cut_content(durable: bytes, current: bytes | None, mode: str, rng: random.Random) -> bytes:
    """What one file reads back after the cut, given its durable and its last written content."""
    if mode == "drop" or current is None or current == durable:
        return durable
    if mode == "torn":
        first_diff = next(
            (i for i, (a, b) in enumerate(zip(durable, current)) if a != b), min(len(durable), len(current))
        )
        if len(current) < len(durable):
            return durable  # an unsynced shrink is simply not there
        cut = rng.randint(first_diff, len(current))
        return current[:cut] + durable[cut:]
    out = bytearray(durable)
    if len(current) > len(out):
        out.extend(bytes(len(current) - len(out)))
    for page_start in range(0, len(current), _PAGE_BYTES):
        page_end = min(page_start + _PAGE_BYTES, len(current))
        if current[page_start:page_end] != bytes(out[page_start:page_end]) and rng.random() < 0.5:
            out[page_start:page_end] = current[page_start:page_end]
    return bytes(out)


def power_cut(root: str, mode: str, seed: int) -> dict[str, int]:
    """Roll `root` back to what survives a power failure; return counts of what changed.

    Call only when no process has the directory open (after `SIGKILL`). Without shadow state (the
    node did not run in shadow mode) this raises, because guessing would make a test lie.
    """
    if mode not in POWER_CUT_MODES:
        raise ValueError(f"power cut mode must be one of {POWER_CUT_MODES}, not {mode!r}")
    root = os.path.abspath(root)
    state_path = os.path.join(shadow_dir(root), "state.json")
    if not os.path.exists(state_path):
        raise FileNotFoundError(f"no shadow state for {root}: was the node run with JSRAFT_TEST_SHADOW_DISK=1?")
    _forget_tracker(root)
    with open(state_path) as handle:
        state = json.load(handle)
    rng = random.Random(seed)
    dir_numbers = set(state["dirs"])
    keep_dirs, keep_files = _durable_tree(state["durable"], dir_numbers)
    live_by_number = {number: rel for rel, number in state["names"].items() if number not in dir_numbers}
    contents: dict[str, bytes] = {}
    for rel, number in sorted(keep_files.items()):
        content_path = os.path.join(shadow_dir(root), "ino", str(number))
        durable = open(content_path, "rb").read() if os.path.exists(content_path) else b""
        live = live_by_number.get(number)
        current = None
        if live is not None and os.path.isfile(os.path.join(root, live)):
            current = open(os.path.join(root, live), "rb").read()
        contents[rel] = _cut_content(durable, current, mode, rng)
    removed = 0
    for directory, subdirs, files in os.walk(root, topdown=False):
        rel_dir = os.path.relpath(directory, root)
        rel_dir = "" if rel_dir == "." else rel_dir
        for name in files:
            os.remove(os.path.join(directory, name))
            removed += 1
        if rel_dir and rel_dir not in keep_dirs:
            os.rmdir(directory)
    for rel in sorted(keep_dirs):
        os.makedirs(os.path.join(root, rel), exist_ok=True)
    for rel, data in contents.items():
        with open(os.path.join(root, rel), "wb") as handle:
            handle.write(data)
    shutil.rmtree(shadow_dir(root))
    return {"files_kept": len(contents), "files_before": removed, "dirs_kept": len(keep_dirs)}
