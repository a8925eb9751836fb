"""The ``az://`` backend of the Source contract suite: an AzureSource reading Azurite through a
proxy that counts open connections."""

from __future__ import annotations

import itertools
from typing import Any

from _backends import Backend
from _faults import FaultProxy

__all__ = ["azure_backend"]

_names = itertools.count()


def azure_backend(server: Any) -> Backend:
    """An AzureSource on ``server`` (a running :class:`shardstream.testing.azurite.Azurite`) whose
    requests pass a :class:`FaultProxy`, so ``released`` is checked at the wire. Azurite is
    addressed path-style, so the endpoint through the proxy is ``{proxy.url}/devstoreaccount1``."""
    from shardstream.sources.azure import AzureSource

    container = server.create_container(f"contracts-{next(_names)}")
    proxy = FaultProxy(server.endpoint_url).start()
    source = AzureSource(**server.options_for(endpoint_url=f"{proxy.url}/{server.account_name}", retries=3))

    def put(data: bytes) -> str:
        url: str = server.put_blob(container, f"obj-{next(_names)}.bin", data)
        return url

    return Backend(
        source,
        put,
        f"az://{container}/missing.bin",
        released=lambda: proxy.open_connections == 0,
        cleanup=[source.close, proxy.stop],
    )
