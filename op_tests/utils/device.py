import torch

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda", torch.cuda.current_device()) if ON_GPU else torch.device("cpu")


def by_device(cpu, gpu):
    """Parameter lists chosen by device: small on the interpreter, the full sweep on a GPU."""
    return gpu if ON_GPU else cpu
