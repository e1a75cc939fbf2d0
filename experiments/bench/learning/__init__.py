"""One algorithm on a small task: time and env steps to solve it (CartPole-v1,
Pendulum-v1), against peer implementations where there are some."""
