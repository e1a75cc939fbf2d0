"""rlpar's building blocks against raw torch and peer libraries: RPC, parameter and
gradient servers, replay buffers, the trajectory queue, vector envs, checkpoints."""
