"""What a batch costs the controller's interpreter with the edge in process and with edge processes
(`[controller] edge_processes`), stage by stage, on bench/controller_load.py's steady-state batch.

In process, the interpreter runs the edge (`validate.parse_batch`: gunzip, typed decode, checks) and the
writer's `columns.concat` of lists. With edge processes, a worker runs the edge and encodes the reply
(`edge_wire.encode_batch`); the interpreter decodes it (`edge_wire.decode_reply`) and concatenates arrays.
Thread CPU, best of 7 passes over 64 batches (a group's worth), per batch.

Usage: python bench/edge_wire_cost.py
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.controller_load import first_bodies, template
from bench.machine_load import LoadWindow
from fleetguard.controller import edge_wire
from fleetguard.controller.columns import concat
from fleetguard.controller.validate import IngestBatch, parse_batch
from fleetguard.store.schema import TABLES

BATCHES = 64


def best_ms(fn: Callable[[], object], passes: int = 7) -> float:
    """Thread CPU per batch of `fn` (which handles BATCHES batches), the best of `passes`."""
    times = []
    for _ in range(passes):
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return min(times) / BATCHES * 1000


def concat_all(batches: list[IngestBatch]) -> dict[str, Any]:
    out = {}
    for name, table in TABLES.items():
        parts = [b.tables[name] for b in batches if name in b.tables]
        if parts:
            out[name] = concat(table, parts)
    return out


def main() -> None:
    window = LoadWindow()
    text, rows = template(5)
    hosts = [f"h{i}" for i in range(BATCHES)]
    bodies = first_bodies(text, hosts)
    parsed = [parse_batch(b, h) for b, h in zip(bodies, hosts, strict=True)]
    frames = [edge_wire.encode_batch(p) for p in parsed]
    replies = [edge_wire.decode_reply(f) for f in frames]
    edge = best_ms(lambda: [parse_batch(b, h) for b, h in zip(bodies, hosts, strict=True)])
    request = best_ms(
        lambda: [edge_wire.encode_request(h, True, 0.0, b) for b, h in zip(bodies, hosts, strict=True)]
    )
    encode = best_ms(lambda: [edge_wire.encode_batch(p) for p in parsed])
    decode = best_ms(lambda: [edge_wire.decode_reply(f) for f in frames])
    lists = best_ms(lambda: concat_all(parsed))
    arrays = best_ms(lambda: concat_all(replies))
    print(f"{rows} rows per batch, reply {len(frames[0])} bytes; load {window.close().cell()}")
    print("| edge | in the controller's interpreter, ms per batch | in an edge process, ms per batch |")
    print("|---|---|---:|")
    print(f"| in process | edge {edge:.3f} + concat of lists {lists:.3f} = **{edge + lists:.3f}** | - |")
    print(
        f"| edge processes | request {request:.3f} + decode reply {decode:.3f} + concat of arrays "
        f"{arrays:.3f} = **{request + decode + arrays:.3f}** | {edge + encode:.3f} (edge {edge:.3f} + "
        f"encode reply {encode:.3f}) |"
    )


if __name__ == "__main__":
    main()
