"""Run Python the way a default Docker container would: the kernel refuses namespaces and mounts.

    python tests/scripts/refuse_namespaces.py -c "CODE"   (any arguments of ``python``)

Loads a seccomp filter (libseccomp) that fails ``unshare``, ``setns``, ``mount``, ``umount2`` and
``pivot_root`` with EPERM, then replaces itself with ``python ARGS``; the filter holds for every descendant, as
Docker's default profile and dropped ``CAP_SYS_ADMIN`` do. Used by the fail-closed tests of the sandbox.
"""

import ctypes
import ctypes.util
import errno
import os
import sys

lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)
lib.seccomp_init.restype = ctypes.c_void_p
lib.seccomp_init.argtypes = [ctypes.c_uint32]
lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
lib.seccomp_load.argtypes = [ctypes.c_void_p]
ctx = lib.seccomp_init(0x7FFF0000)  # allow by default
for name in (b"unshare", b"setns", b"mount", b"umount2", b"pivot_root"):
    nr = lib.seccomp_syscall_resolve_name(name)
    if lib.seccomp_rule_add(ctx, 0x00050000 | errno.EPERM, nr, 0) != 0:
        sys.exit(f"seccomp rule for {name.decode()} failed")
if lib.seccomp_load(ctx) != 0:
    sys.exit("seccomp_load failed")
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
