"""rlpar: the runtime for parallel and distributed reinforcement learning.

Subpackages: ``parallel`` (one machine), ``distributed`` (RPC world and groups),
``servers`` (key-value, parameter and gradient servers), ``buffers`` (replay).
Importing this package has no side effects.
"""

__version__ = "0.1.0"
