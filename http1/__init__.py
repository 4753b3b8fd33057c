"""The platform's lean HTTP/1.1 client, for its own busiest hops: the api's calls to its nodes and the
routine worker's step calls to the api. It lives here, not in the SDK: it needs httptools (uvicorn's
parser), and the SDK needs httpx only.

- `client`: `Http1` (keep-alive connections by origin), its `Response`, and its errors:

      Http1Error            a request that got no complete answer
      ├── ConnectFailed     no connection: nothing was sent
      ├── TimedOut          connecting or answering took longer than allowed
      └── TransportFailed   the connection broke, or what came back was not an answer
"""
