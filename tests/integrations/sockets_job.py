"""One rank of test_gloo_lazy_sockets.py, under torchrun (Gloo, CPU): which TCP connections flopmeter's own
group opens. Prints one line `SOCKETS {json}` with this process's established TCP sockets that were not there
before the Meter was made: right after the Meter (its `new_group(backend="gloo")`) and after a few logs, each
socket as its two endpoints, so that the test can pair them across ranks.

usage: sockets_job.py LOGS [TOPK_INTERVAL_LOGS]   (TORCH_GLOO_LAZY_INIT from the environment, as a user would
set it; TOPK_INTERVAL_LOGS: how often the per-rank table is gathered, by c10d's all-reduce; default 1000, never)
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from typing import Dict, List, Set, Tuple

import torch.distributed as dist

import flopmeter

ESTABLISHED = "01"  # the state column of /proc/net/tcp (include/net/tcp_states.h: TCP_ESTABLISHED = 1)


def tcp_connections() -> Dict[int, Tuple[str, str, str]]:
    """Every TCP socket of this network namespace: inode -> (local endpoint, remote endpoint, state)."""
    table = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(name):
            continue
        with open(name) as f:
            next(f)  # the header
            for line in f:
                fields = line.split()
                table[int(fields[9])] = (fields[1], fields[2], fields[3])
    return table


def own_socket_inodes() -> Set[int]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile (the listing's own fd, a thread's)
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:["):-1]))
    return inodes


def established(exclude: Set[int]) -> List[List[str]]:
    """This process's established TCP sockets not in `exclude`, each as [local endpoint, remote endpoint]."""
    table = tcp_connections()
    return sorted([table[i][0], table[i][1]] for i in own_socket_inodes() - exclude
                  if i in table and table[i][2] == ESTABLISHED)


def line_up(store, name: str, world: int) -> None:
    """A barrier over the store: no collective, so no connection of any group."""
    if store.add(name, 1) == world:
        store.set(name + "/all", "1")
    store.wait([name + "/all"])


def main() -> None:
    logs = int(sys.argv[1])
    table_interval = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    dist.init_process_group("gloo")  # env:// from torchrun; its store is torchrun's agent's TCPStore
    rank, world = dist.get_rank(), dist.get_world_size()
    # A store client of the test's own, to line the ranks up without a collective (which, with lazy init,
    # would connect the default group's pairs in the middle of the measurement).
    client = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
                           timeout=datetime.timedelta(seconds=120))
    store = dist.PrefixStore("sockets_job/", client)
    # Everything open now (the stores' connections; the default group's full mesh when lazy init is off) is
    # the trainer's, not flopmeter's.
    before = own_socket_inodes()
    # By default ordinary logs only (the per-rank table every 1000 logs: never here), each one log-depth
    # all-reduce (recursive halving and doubling).
    meter = flopmeter.Meter(model="tiny_vlm", peak={"tflops_per_gpu": 1000.0}, sinks={"console": False},
                            logging={"emit": "all", "topk_interval_logs": table_interval,
                                     "collective_timeout_ms": 60000},
                            small_allreduce="log_depth")
    result = {"rank": rank, "algorithm": meter._collective.algorithm, "after_group": established(before)}
    # No rank starts its first log (whose messages open connections, with lazy init) before every rank has
    # looked at what making the group opened.
    line_up(store, "group_made", world)
    for step in range(1, logs + 1):
        meter.on_microbatch(cu_seqlens=[0, 10 * (rank + 1)], samples=1)
        meter.on_log(step)
    record = meter.flush()  # waits for the last log's pass: every pass of this rank has finished
    result["after_logs"] = established(before)
    result["tokens_seen"] = None if record is None else record.get("train/tokens_seen")
    print("SOCKETS " + json.dumps(result), flush=True)
    # No rank leaves while a peer may still read from it or is still to measure.
    line_up(store, "measured", world)
    meter.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
