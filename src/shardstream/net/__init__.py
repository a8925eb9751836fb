"""HTTP/1.1 on sockets, below the sources: it knows no URL scheme and no S3.

- :mod:`.pool`: streamed bodies on keep-alive connections (``http.client``), for shards.
- :mod:`.whole`: whole small bodies into a caller's buffer, for single objects.
- :mod:`.multiplex`: many whole-body GETs on one thread's ``epoll`` loop (:mod:`.response`
  parses each answer).
- :mod:`.idle`: the idle keep-alive connections both clients keep, fork-aware.
- :mod:`.redirect`: following redirects without leaking credentials.
- :mod:`.proxy`: which proxy, if any, an origin goes through (``HTTPS_PROXY``, ``ALL_PROXY``,
  ``NO_PROXY``, ...); :mod:`.tunnel`: connecting through one (``CONNECT``, SOCKS, TLS to the
  proxy), for all three clients; :mod:`.nested_tls`: TLS to an origin inside TLS to a proxy.

The sources (:mod:`shardstream.sources`) sign and address requests and translate statuses and
socket errors into shardstream errors; nothing above them imports this package.
"""

__all__: list[str] = []
