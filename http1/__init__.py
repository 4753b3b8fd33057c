"""HTTP/1.1 of the platform's own processes, on httptools (uvicorn's parser): the lean client of its
busiest hops (the api's calls to its nodes and the routine worker's step calls to the api; here, not in
the SDK, which needs httpx only), and the bounded protocol every server of the platform runs under
uvicorn.

- `server`: `BoundedHttp`, uvicorn's httptools protocol with a bounded head (431) and bounded times to
  send the head and the body (408); uvicorn's `--http` names it `SERVER_PROTOCOL`.

- `client`: `Http1` (keep-alive connections by origin), its `Response`, and its errors:

      Http1Error            a request that got no complete answer
      ├── ConnectFailed     no connection: nothing was sent
      ├── TimedOut          connecting or answering took longer than allowed
      └── TransportFailed   the connection broke, or what came back was not an answer
"""
