"""gRPC plumbing shared by every Kernel Forge service: servers, channels and error mapping."""
