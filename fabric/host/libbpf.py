"""The few libbpf calls fabric needs, through ctypes: load a compiled BPF object, read
and write its maps, attach XDP and tc programs, and read a ring buffer.

libbpf (``libbpf.so.1``, Debian's ``libbpf1``) does the ELF and BTF work; nothing
here parses an object. Every call needs root (CAP_BPF, CAP_NET_ADMIN).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path
from typing import Callable

from fabric.errors import UserError

XDP_FLAGS_SKB_MODE = 1 << 1  # generic XDP: runs in the stack, before packet sockets
BPF_F_LOCK = 4               # a map update that takes the value's spin lock
BPF_TC_EGRESS = 1 << 1       # enum bpf_tc_attach_point

_SAMPLE_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class BpfError(UserError, RuntimeError):
    """libbpf is missing, or a BPF object, map or attachment failed."""


def _lib() -> ctypes.CDLL:
    name = ctypes.util.find_library("bpf") or "libbpf.so.1"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        raise BpfError("libbpf is not installed (Debian: libbpf1); run scripts/setup.sh"
                       ) from None
    pointer, cint, cstr = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    signatures = {
        "bpf_object__open_file": (pointer, [cstr, pointer]),
        "bpf_object__load": (cint, [pointer]),
        "bpf_object__close": (None, [pointer]),
        "bpf_object__find_program_by_name": (pointer, [pointer, cstr]),
        "bpf_object__find_map_by_name": (pointer, [pointer, cstr]),
        "bpf_program__fd": (cint, [pointer]),
        "bpf_map__fd": (cint, [pointer]),
        "bpf_map__value_size": (ctypes.c_uint32, [pointer]),
        "bpf_map_lookup_elem": (cint, [cint, pointer, pointer]),
        "bpf_map_update_elem": (cint, [cint, pointer, pointer, ctypes.c_uint64]),
        "bpf_map_lookup_elem_flags": (cint, [cint, pointer, pointer, ctypes.c_uint64]),
        "bpf_map_get_fd_by_id": (cint, [ctypes.c_uint32]),
        "bpf_obj_get_info_by_fd": (cint, [cint, pointer, ctypes.POINTER(ctypes.c_uint32)]),
        "bpf_xdp_attach": (cint, [cint, cint, ctypes.c_uint32, pointer]),
        "bpf_xdp_detach": (cint, [cint, ctypes.c_uint32, pointer]),
        "bpf_map_delete_elem": (cint, [cint, pointer]),
        "bpf_map__reuse_fd": (cint, [pointer, cint]),
        "bpf_prog_test_run_opts": (cint, [cint, pointer]),
        "bpf_tc_hook_create": (cint, [pointer]),
        "bpf_tc_attach": (cint, [pointer, pointer]),
        "ring_buffer__new": (pointer, [cint, _SAMPLE_CB, pointer, pointer]),
        "ring_buffer__poll": (cint, [pointer, cint]),
        "ring_buffer__free": (None, [pointer]),
    }
    for function, (restype, argtypes) in signatures.items():
        getattr(lib, function).restype = restype
        getattr(lib, function).argtypes = argtypes
    return lib


_LIBBPF: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    """libbpf, loaded once."""
    global _LIBBPF
    if _LIBBPF is None:
        _LIBBPF = _lib()
    return _LIBBPF


def _check(ret: int, what: str) -> int:
    if ret < 0:
        raise BpfError(f"{what} failed: {os.strerror(-ret if ret != -1 else ctypes.get_errno())}")
    return ret


class BpfObject:
    """A compiled BPF object, loaded into the kernel (its maps created, its programs
    verified). Close it to release what this process holds; attached programs stay
    attached until detached or their device goes. ``reuse`` names maps that are not
    created but shared with another object, by that map's fd (the definitions must
    match)."""

    def __init__(self, path: Path, reuse: dict[str, int] | None = None) -> None:
        self._obj = lib().bpf_object__open_file(str(path).encode(), None)
        if not self._obj:
            raise BpfError(f"cannot open BPF object {path}: "
                           f"{os.strerror(ctypes.get_errno())}")
        for name, fd in (reuse or {}).items():
            ret = lib().bpf_map__reuse_fd(self._map(name), fd)
            if ret:
                self.close()
                raise BpfError(f"map {name} of {path} cannot share map fd {fd}: "
                               f"{os.strerror(-ret)}")
        ret = lib().bpf_object__load(self._obj)
        if ret:
            lib().bpf_object__close(self._obj)
            self._obj = None
            raise BpfError(f"the kernel refused BPF object {path}: {os.strerror(-ret)} "
                           f"(the verifier's log is on stderr)")

    def program_fd(self, name: str) -> int:
        """The fd of program ``name`` (its function name)."""
        prog = lib().bpf_object__find_program_by_name(self._obj, name.encode())
        if not prog:
            raise BpfError(f"the BPF object has no program {name}")
        return _check(lib().bpf_program__fd(prog), f"program {name}")

    def _map(self, name: str) -> int:
        found = lib().bpf_object__find_map_by_name(self._obj, name.encode())
        if not found:
            raise BpfError(f"the BPF object has no map {name}")
        return found

    def map_fd(self, name: str) -> int:
        """The fd of map ``name``."""
        return _check(lib().bpf_map__fd(self._map(name)), f"map {name}")

    def value_size(self, name: str) -> int:
        """The size of one value of map ``name``, in bytes."""
        return lib().bpf_map__value_size(self._map(name))

    def close(self) -> None:
        """Release the object (maps live on while an attached program uses them)."""
        if self._obj:
            lib().bpf_object__close(self._obj)
            self._obj = None


def map_update(fd: int, key: bytes, value: bytes, flags: int = 0) -> None:
    """Set ``key`` to ``value`` in the map ``fd``."""
    k, v = ctypes.create_string_buffer(key, len(key)), ctypes.create_string_buffer(value,
                                                                                   len(value))
    _check(lib().bpf_map_update_elem(fd, k, v, flags), "bpf map update")


def map_lookup(fd: int, key: bytes, size: int, flags: int = 0) -> bytes | None:
    """The ``size``-byte value of ``key`` in map ``fd``; None when it has none."""
    k, v = ctypes.create_string_buffer(key, len(key)), ctypes.create_string_buffer(size)
    if lib().bpf_map_lookup_elem_flags(fd, k, v, flags) < 0:
        return None
    return v.raw


def map_id(fd: int) -> int:
    """The kernel's id of map ``fd`` (another process opens it with :func:`map_by_id`)."""
    info = ctypes.create_string_buffer(80)  # struct bpf_map_info: type, id, ...
    size = ctypes.c_uint32(len(info))
    _check(lib().bpf_obj_get_info_by_fd(fd, info, ctypes.byref(size)), "bpf map info")
    return int.from_bytes(info.raw[4:8], "little")


def map_by_id(ident: int) -> int:
    """A new fd of the map with kernel id ``ident``."""
    return _check(lib().bpf_map_get_fd_by_id(ident), f"bpf map {ident}")


def xdp_attach(ifindex: int, prog_fd: int, flags: int = XDP_FLAGS_SKB_MODE) -> None:
    """Attach an XDP program to interface ``ifindex`` of this thread's namespace."""
    _check(lib().bpf_xdp_attach(ifindex, prog_fd, flags, None), f"XDP attach to {ifindex}")


def xdp_detach(ifindex: int, flags: int = XDP_FLAGS_SKB_MODE) -> None:
    """Detach the XDP program of interface ``ifindex``; a gone interface is not an error."""
    lib().bpf_xdp_detach(ifindex, flags, None)


class _TcHook(ctypes.Structure):  # struct bpf_tc_hook (libbpf.h)
    _fields_ = [("sz", ctypes.c_size_t), ("ifindex", ctypes.c_int),
                ("attach_point", ctypes.c_int), ("parent", ctypes.c_uint32)]


class _TcOpts(ctypes.Structure):  # struct bpf_tc_opts (libbpf.h)
    _fields_ = [("sz", ctypes.c_size_t), ("prog_fd", ctypes.c_int), ("flags", ctypes.c_uint32),
                ("prog_id", ctypes.c_uint32), ("handle", ctypes.c_uint32),
                ("priority", ctypes.c_uint32)]


def tc_egress_attach(ifindex: int, prog_fd: int) -> None:
    """Attach a direct-action tc program to the egress hook of interface ``ifindex``
    (its ``clsact`` qdisc is added if missing; it goes with the interface)."""
    hook = _TcHook(ctypes.sizeof(_TcHook), ifindex, BPF_TC_EGRESS, 0)
    ret = lib().bpf_tc_hook_create(ctypes.byref(hook))
    if ret < 0 and ret != -17:  # EEXIST: the interface has its clsact already
        _check(ret, f"clsact on interface {ifindex}")
    opts = _TcOpts(ctypes.sizeof(_TcOpts), prog_fd, 0, 0, 0, 0)
    _check(lib().bpf_tc_attach(ctypes.byref(hook), ctypes.byref(opts)),
           f"tc egress attach to {ifindex}")


class _TestRunOpts(ctypes.Structure):  # struct bpf_test_run_opts (bpf.h)
    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p),
                ("data_out", ctypes.c_void_p), ("data_size_in", ctypes.c_uint32),
                ("data_size_out", ctypes.c_uint32), ("ctx_in", ctypes.c_void_p),
                ("ctx_out", ctypes.c_void_p), ("ctx_size_in", ctypes.c_uint32),
                ("ctx_size_out", ctypes.c_uint32), ("retval", ctypes.c_uint32),
                ("repeat", ctypes.c_int), ("duration", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32),
                ("batch_size", ctypes.c_uint32)]


def test_run(prog_fd: int, packet: bytes, ctx: bytes = b"") -> int:
    """Run a loaded program once on ``packet`` (BPF_PROG_TEST_RUN; ``ctx`` is its
    ``struct __sk_buff`` for a tc program) and return what it returned."""
    data = ctypes.create_string_buffer(packet, len(packet))
    context = ctypes.create_string_buffer(ctx, len(ctx)) if ctx else None
    opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts), data_in=ctypes.addressof(data),
                        data_size_in=len(packet),
                        ctx_in=ctypes.addressof(context) if context else None,
                        ctx_size_in=len(ctx), repeat=1)
    _check(lib().bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts)), "BPF test run")
    return opts.retval


def map_delete(fd: int, key: bytes) -> None:
    """Delete ``key`` from the map; a missing key is not an error."""
    k = ctypes.create_string_buffer(key, len(key))
    lib().bpf_map_delete_elem(fd, k)


class RingBuffer:
    """Consumes a ``BPF_MAP_TYPE_RINGBUF`` map: :meth:`poll` calls ``handle(record)``
    for every record written since, with the record's bytes."""

    def __init__(self, map_fd: int, handle: Callable[[bytes], None]) -> None:
        def sample(_ctx: int, data: int, size: int) -> int:
            handle(ctypes.string_at(data, size))
            return 0

        self._callback = _SAMPLE_CB(sample)  # kept: libbpf calls it from C
        self._rb = lib().ring_buffer__new(map_fd, self._callback, None, None)
        if not self._rb:
            raise BpfError(f"ring buffer: {os.strerror(ctypes.get_errno())}")

    def poll(self, timeout_ms: int) -> int:
        """Wait up to ``timeout_ms`` for records and handle them; how many there were."""
        ret = lib().ring_buffer__poll(self._rb, timeout_ms)
        if ret < 0 and -ret != 4:  # EINTR: a signal; the caller loops
            raise BpfError(f"ring buffer poll: {os.strerror(-ret)}")
        return max(ret, 0)

    def close(self) -> None:
        """Release the ring buffer."""
        if self._rb:
            lib().ring_buffer__free(self._rb)
            self._rb = None
