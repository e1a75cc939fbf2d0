"""Many processes: World, RpcGroup, CollectiveGroup and a local launcher."""
