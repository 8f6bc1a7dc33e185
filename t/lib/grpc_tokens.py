#!/usr/bin/python3
"""A gRPC upstream and client for the tests (t/lib/RLTest/Grpc.pm runs them).

Debian's python3-grpcio, hence /usr/bin/python3. No .proto: the methods take and give raw
bytes (identity serializers). A request is ASCII "name=value" words separated by spaces:
  tokens=N    the call ends with the trailer "x-tokens: N" (no tokens=: no such trailer)
  messages=N  the streamed method sends N messages of 100 bytes before its trailer (3)

  grpc_tokens.py serve SECONDS
      serves /rltest.Tokens/Unary (one answer) and /rltest.Tokens/Stream (N answers) on a free
      loopback port, plain-text HTTP/2; prints the port, then runs until its parent goes away
      or SECONDS have passed.
  grpc_tokens.py call PORT METHOD REQUEST [NAME=VALUE ...]
      calls /rltest.Tokens/METHOD on 127.0.0.1:PORT with those request metadata and prints
      one JSON object: code (a grpc.StatusCode name), details, messages (count), initial and
      trailing (metadata as [name, value] pairs).
"""
import json
import os
import sys
import threading
import time
from concurrent import futures

import grpc

SERVICE = 'rltest.Tokens'


def _ident(b):
    return b


def _parse(request):
    words = dict(w.split('=', 1) for w in request.decode('ascii', 'replace').split() if '=' in w)
    return words.get('tokens'), int(words.get('messages', '3'))


def _trailer(context, tokens):
    if tokens is not None:
        context.set_trailing_metadata((('x-tokens', tokens),))


def unary(request, context):
    tokens, _ = _parse(request)
    _trailer(context, tokens)
    return b'ok'


def stream(request, context):
    tokens, n = _parse(request)
    # Sent with the final status, after every message.
    _trailer(context, tokens)
    for i in range(min(n, 1000)):
        yield bytes([0x61 + i % 26]) * 100
        time.sleep(0.01)    # separate DATA frames, the trailer well after the first


def serve(seconds):
    parent = os.getppid()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    handlers = {
        'Unary': grpc.unary_unary_rpc_method_handler(unary, _ident, _ident),
        'Stream': grpc.unary_stream_rpc_method_handler(stream, _ident, _ident),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port('127.0.0.1:0')
    server.start()
    print(port, flush=True)
    deadline = time.time() + seconds
    while os.getppid() == parent and time.time() < deadline:
        time.sleep(0.2)
    server.stop(0)


def call(port, method, request, metadata):
    out = {'messages': 0, 'initial': [], 'trailing': []}
    with grpc.insecure_channel('127.0.0.1:%d' % port) as ch:
        path = '/%s/%s' % (SERVICE, method)
        try:
            if method == 'Stream':
                it = ch.unary_stream(path, _ident, _ident)(request, metadata=metadata, timeout=10)
                for _ in it:
                    out['messages'] += 1
                rpc = it
            else:
                _, rpc = ch.unary_unary(path, _ident, _ident).with_call(request, metadata=metadata, timeout=10)
                out['messages'] = 1
        except grpc.RpcError as e:
            rpc = e
        out['code'] = rpc.code().name
        out['details'] = rpc.details() or ''
        for key, fn in (('initial', rpc.initial_metadata), ('trailing', rpc.trailing_metadata)):
            md = fn() or ()
            out[key] = [[k, v if isinstance(v, str) else v.decode('latin-1')] for k, v in md]
    print(json.dumps(out), flush=True)


def main(argv):
    if len(argv) >= 2 and argv[0] == 'serve':
        serve(float(argv[1]))
    elif len(argv) >= 4 and argv[0] == 'call':
        md = tuple(tuple(a.split('=', 1)) for a in argv[4:])
        call(int(argv[1]), argv[2], argv[3].encode('ascii'), md)
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
