"""Multi-agent: MADDPG on MPE against TorchRL and a random policy, and the time per
joint action and update in every agent-parallel mode."""
