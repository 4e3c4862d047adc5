#!/usr/bin/env python3
"""Interoperability check run by tests/integration_tls_python.c.

  tls_interop.py ADDR CA_FILE TOKEN_FILE

Calls /fleet.Replay/Info of the replay shard at ADDR (serving with run.tls_dir) through
grpcio with a generic unary call on raw bytes (an empty InfoRequest; no generated stubs):
over TLS trusting CA_FILE with "authorization: Bearer <token>" it must succeed; with a
wrong token or none it must end UNAUTHENTICATED with fleet's message; a plaintext channel
must fail (UNAVAILABLE: the server speaks only TLS). Exit status 0 when every case went
as expected, 1 otherwise (printed).
"""
import sys

import grpc

METHOD = "/fleet.Replay/Info"


def info(channel, metadata, timeout):
    call = channel.unary_unary(METHOD)  # no serializers: bytes in, bytes out
    return call(b"", metadata=metadata, timeout=timeout)


def expect_error(name, channel, metadata, code, words):
    try:
        info(channel, metadata, 10)
    except grpc.RpcError as e:
        details = e.details() or ""
        if e.code() != code or not all(w in details for w in words):
            print(f"{name}: expected {code} with {words}, got {e.code()}: {details}")
            return False
        print(f"{name}: {e.code()}: {details}")
        return True
    print(f"{name}: the call succeeded, expected {code}")
    return False


def main():
    addr, ca_file, token_file = sys.argv[1:4]
    with open(ca_file, "rb") as f:
        ca = f.read()
    with open(token_file) as f:
        token = f.read().strip()
    ok = True
    with grpc.secure_channel(addr, grpc.ssl_channel_credentials(root_certificates=ca)) as tls:
        reply = info(tls, [("authorization", "Bearer " + token)], 30)
        if not isinstance(reply, bytes) or not reply:
            print(f"right token: expected the InfoResponse's bytes, got {reply!r}")
            ok = False
        else:
            print(f"right token: InfoResponse of {len(reply)} bytes")
        wrong = "0" * len(token)
        ok &= expect_error("wrong token", tls, [("authorization", "Bearer " + wrong)],
                           grpc.StatusCode.UNAUTHENTICATED, ["token is wrong"])
        ok &= expect_error("missing token", tls, None, grpc.StatusCode.UNAUTHENTICATED, ["no token"])
    with grpc.insecure_channel(addr) as plain:
        ok &= expect_error("plaintext channel", plain, [("authorization", "Bearer " + token)],
                           grpc.StatusCode.UNAVAILABLE, [])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
