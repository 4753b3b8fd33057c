# One image for the api, the routine worker and the node (the node needs privileges for namespaces and cgroups).
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap debootstrap gcc libc6-dev jq \
    libstdc++6 \
 && rm -rf /var/lib/apt/lists/*
# Node.js 20 (bookworm's own nodejs is 18, without the permission model): the runtime of js actions
# (docs/node.md) and the parser of `b3os pack build`; it links only glibc and libstdc++ of bookworm.
COPY --from=node:20-bookworm-slim /usr/local/bin/node /usr/bin/node
WORKDIR /app
COPY pyproject.toml README.md ./
COPY sdk/python ./sdk/python
COPY packs ./packs
COPY engine ./engine
COPY activities ./activities
COPY http1 ./http1
COPY telemetry ./telemetry
COPY egress ./egress
COPY node ./node
COPY api ./api
COPY cli ./cli
COPY examples ./examples
# One command: the platform (b3os-platform) depends on the SDK (b3os), which only ./sdk/python provides.
RUN pip install --no-cache-dir ./sdk/python .
ENV B3OS_KEYS_DIR=/data/keys
