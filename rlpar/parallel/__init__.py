"""One machine: exception-watching threads and processes, events, pools, queues.

Importing this package has no side effects and does not import torch.
"""

from rlpar.parallel.context_pool import ContextProcessPool, ContextThreadPool
from rlpar.parallel.event import MultiEvent, wait_all, wait_any
from rlpar.parallel.pool import Pool, PoolClosed
from rlpar.parallel.process import START_METHODS, Process, get_context
from rlpar.parallel.process_pool import ProcessPool
from rlpar.parallel.queue import POLICIES, TensorQueue
from rlpar.parallel.result import AsyncResult
from rlpar.parallel.thread import Thread
from rlpar.parallel.thread_pool import ThreadPool
from rlpar.parallel.watch import watch_all

__all__ = [
    "POLICIES",
    "START_METHODS",
    "AsyncResult",
    "ContextProcessPool",
    "ContextThreadPool",
    "MultiEvent",
    "Pool",
    "PoolClosed",
    "Process",
    "ProcessPool",
    "TensorQueue",
    "Thread",
    "ThreadPool",
    "get_context",
    "wait_all",
    "wait_any",
    "watch_all",
]
