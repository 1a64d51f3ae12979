"""hla-oracle from Python. For now: the server side of `hla fuzz --exec-server`."""
from .exec_server import serve

__all__ = ["serve"]
