"""How `make nbval` starts the notebooks' kernels: over Unix sockets (IPC), each kernel under a name of its own.

`make nbval` runs two notebooks at once, each in its own kernel started by its own pytest-xdist worker. Over TCP, the
worker picks five free ports and the kernel binds them a moment later; in between, a socket of the other worker or
its kernel can take one of them (jupyter_client's port cache only sees the ports of its own process), and the kernel
then dies at start-up ("Kernel died before replying to kernel_info"). Over IPC the sockets are files whose names carry
a random part, so no two kernels can share one. (jupyter_client's own IPC default names them after the working
directory alone: ``kernel-ipc-1``..., the same for two notebooks in one folder.)
"""

import os
import tempfile
import uuid

import nbval.kernel
from jupyter_client.manager import KernelManager
from traitlets import CaselessStrEnum, default


class IPCKernelManager(KernelManager):
    """A kernel manager whose kernel listens on ``<tmp>/kernel-<random>-ipc-N`` sockets instead of TCP ports."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)

    @default("ip")
    def _socket_prefix(self) -> str:
        # a short path: a Unix socket's name must stay under 108 bytes
        return os.path.join(tempfile.gettempdir(), f"kernel-{uuid.uuid4().hex[:16]}-ipc")


nbval.kernel.KernelManager = IPCKernelManager
