"""Role shells of the experiments: they own the transport and call algorithm methods."""
