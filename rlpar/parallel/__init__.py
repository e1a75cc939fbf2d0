"""One machine: exception-watching threads and processes, events, pools, queues."""
