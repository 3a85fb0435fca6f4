"""File I/O behind one small protocol (layer L1).

Owns: every byte jsraft's durable layers (`wal`, `store`) read or write. They receive a `Disk` and never
open files themselves (a test enforces it), so the simulator can substitute `SimDisk` and the chaos
tests can run the real node on the shadow disk that makes power cuts reproducible.

`disk.lock` holds `<store_dir>/LOCK` for the life of a node, so a second process (or a second node in
this one) on the same directory is refused with `StoreLocked` before anything is written.

Paths are relative POSIX paths under the disk's root (`"streams/ORDERS/msgs/00000001.blk"`); `".."`
and absolute paths are refused.

Imports: L0, stdlib.
"""

from jsraft.disk.base import Disk, DiskFile, check_relative
from jsraft.disk.os_disk import OsDisk
from jsraft.disk.shadow import POWER_CUT_MODES, power_cut

__all__ = ["POWER_CUT_MODES", "Disk", "DiskFile", "OsDisk", "check_relative", "power_cut"]
