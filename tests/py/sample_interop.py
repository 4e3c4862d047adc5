#!/usr/bin/env python3
"""Interoperability check run by tests/integration_sample_python.c.

  sample_interop.py ADDR

Calls /fleet.Replay/Sample of the replay shard at ADDR through grpcio (a generic unary
call on raw bytes: a SampleRequest for 16 transitions, beta 0.4) and decodes the reply
with Python's protobuf runtime, the message classes built at run time from descriptors
that mirror proto/fleet.proto's Tensor, TransitionBatch and SampleResponse (no protoc).
The shard writes its replies with the observations first and 5-byte length prefixes
(replay/wire.h); this checks that another protobuf implementation reads them: 16
transitions, tensors of dtype uint8 and shape (16, 10, 10, 4) holding 16 x 400 bytes,
each observation as the test inserted it (every byte i % 200 for transition i, next_obs
i % 200 + 1), 16 keys, weights in (0, 1], actions in [0, 6). Exit status 0 when all
holds, 1 otherwise (printed).
"""
import struct
import sys

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def message(file, name, fields):
    m = file.message_type.add(name=name)
    for number, fname, ftype, repeated, type_name in fields:
        f = m.field.add(name=fname, number=number, type=ftype)
        f.label = F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
        if type_name:
            f.type_name = type_name


def classes():
    fd = descriptor_pb2.FileDescriptorProto(name="fleet_interop.proto", package="fleet", syntax="proto3")
    message(fd, "Tensor", [(1, "dtype", F.TYPE_INT32, False, None), (2, "shape", F.TYPE_INT64, True, None),
                           (3, "data", F.TYPE_BYTES, False, None)])
    message(fd, "TransitionBatch", [(1, "count", F.TYPE_UINT32, False, None),
                                    (2, "obs", F.TYPE_MESSAGE, False, ".fleet.Tensor"),
                                    (3, "actions", F.TYPE_INT32, True, None),
                                    (4, "rewards", F.TYPE_FLOAT, True, None),
                                    (5, "discounts", F.TYPE_FLOAT, True, None),
                                    (6, "next_obs", F.TYPE_MESSAGE, False, ".fleet.Tensor"),
                                    (7, "priorities", F.TYPE_FLOAT, True, None)])
    message(fd, "SampleResponse", [(1, "batch", F.TYPE_MESSAGE, False, ".fleet.TransitionBatch"),
                                   (2, "keys", F.TYPE_FIXED64, True, None),
                                   (3, "weights", F.TYPE_FLOAT, True, None),
                                   (4, "probabilities", F.TYPE_DOUBLE, True, None),
                                   (5, "table_size", F.TYPE_UINT64, False, None),
                                   (6, "total_priority", F.TYPE_DOUBLE, False, None),
                                   (7, "min_priority", F.TYPE_DOUBLE, False, None),
                                   (8, "shard_id", F.TYPE_UINT32, False, None),
                                   (9, "sampling_mass", F.TYPE_DOUBLE, False, None),
                                   (10, "updates_applied", F.TYPE_UINT64, False, None),
                                   (11, "updates_stale", F.TYPE_UINT64, False, None)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("fleet.SampleResponse"))


def main():
    addr = sys.argv[1]
    n, ob = 16, 10 * 10 * 4
    # SampleRequest: batch_size = 16 (field 1), beta = 0.4 (field 2), timeout_ms = 5000 (field 3)
    request = bytes([0x08, n, 0x11]) + struct.pack("<d", 0.4) + bytes([0x18, 0x88, 0x27])
    with grpc.insecure_channel(addr) as channel:
        raw = channel.unary_unary("/fleet.Replay/Sample")(request, timeout=30)
    reply = classes()()
    reply.ParseFromString(raw)
    b = reply.batch
    problems = []
    if b.count != n:
        problems.append(f"batch.count {b.count}, expected {n}")
    for name, t, step in (("obs", b.obs, 0), ("next_obs", b.next_obs, 1)):
        if t.dtype != 2 or list(t.shape) != [n, 10, 10, 4] or len(t.data) != n * ob:
            problems.append(f"{name}: dtype {t.dtype}, shape {list(t.shape)}, {len(t.data)} bytes; expected 2, "
                            f"[{n}, 10, 10, 4], {n * ob}")
            continue
        for i in range(n):
            row = t.data[i * ob:(i + 1) * ob]
            base = b.obs.data[i * ob] + step
            if row != bytes([base]) * ob:
                problems.append(f"{name}[{i}] is not {ob} bytes of {base}")
    if len(reply.keys) != n or len(reply.weights) != n or len(reply.probabilities) != n:
        problems.append(f"{len(reply.keys)} keys, {len(reply.weights)} weights, {len(reply.probabilities)} "
                        f"probabilities; expected {n} each")
    if not all(0.0 < w <= 1.0 for w in reply.weights):
        problems.append(f"weights outside (0, 1]: {list(reply.weights)}")
    if len(b.actions) != n or not all(0 <= a < 6 for a in b.actions):
        problems.append(f"actions: {list(b.actions)}")
    if reply.table_size != 200:
        problems.append(f"table_size {reply.table_size}, expected 200")
    for p in problems:
        print(p)
    print(f"sampled {b.count} transitions, {len(raw)} bytes, table_size {reply.table_size}: "
          f"{'ok' if not problems else 'FAILED'}")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
