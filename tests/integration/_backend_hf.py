"""The ``hf`` backend of the Source contract suite: an HFSource reading the Hub stand-in
(:class:`shardstream.testing.hub.HubStandIn`) through one FaultProxy in front of the Hub and one
in front of its CDN (the stand-in puts the CDN proxy's origin in this repo's redirects), so that
"close releases the connection" is measured at the wire on both hosts."""

from __future__ import annotations

import itertools

from _backends import Backend
from _servers import FaultProxy

from shardstream.sources.hf import HFSource
from shardstream.testing.hub import HubStandIn

__all__ = ["hf_backend"]

_names = itertools.count()


def hf_backend(server: HubStandIn) -> Backend:
    """A read-only source: ``put`` commits an LFS file to a fresh dataset repo of the stand-in."""
    cdn = FaultProxy(server.cdn_url).start()
    hub = FaultProxy(server.endpoint).start()
    repo = f"contracts/hf-{next(_names)}"
    server.add_repo(repo, cdn_origin=cdn.url)
    source = HFSource(endpoint=hub.url, token=server.token, retries=3)

    def put(data: bytes) -> str:
        path = f"data/obj-{next(_names)}.bin"
        server.add_file(repo, path, data)
        return f"hf://datasets/{repo}/{path}"

    def released() -> bool:
        # A stream's CDN connection is closed; the Hub's answers (redirects) were read to the end,
        # so their connections may only be idle in the pool, not held by a stream.
        return cdn.open_connections == 0 and hub.open_connections <= source.pool.idle.count()

    return Backend(
        source,
        put,
        f"hf://datasets/{repo}/data/missing.bin",
        released=released,
        cleanup=[source.close, hub.stop, cdn.stop],
    )
