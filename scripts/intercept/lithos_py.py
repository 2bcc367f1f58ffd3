"""Python access to liblithos.so's C API (lithos.h) from inside a process
started with `lithos run`: statistics, live TPCs, process and stream sets.
Absent (present() is False) when the library is not preloaded."""
import ctypes
import json
import os


class Lithos:
    def __init__(self):
        self.lib = ctypes.CDLL(None)
        try:
            self.lib.lithos_stats_json.restype = ctypes.c_int
            self.lib.lithos_live_tpcs.restype = ctypes.c_int
            self.lib.lithos_set_process_tpcs.restype = ctypes.c_int
            self.lib.lithos_stream_set_tpcs.restype = ctypes.c_int
            self.lib.lithos_stream_set_tpcs.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]
            self.lib.lithos_backend.restype = ctypes.c_char_p
        except AttributeError:
            self.lib = None

    def present(self):
        return self.lib is not None

    def stats(self):
        if self.lib is None:
            return {}
        buf = ctypes.create_string_buffer(1 << 17)
        self.lib.lithos_stats_json(buf, len(buf))
        return json.loads(buf.value.decode())

    def live(self):
        if self.lib is None:
            return []
        words = (ctypes.c_uint64 * 2)()
        n = self.lib.lithos_live_tpcs(words)
        if n < 0:
            return []
        return [t for t in range(128) if (words[t // 64] >> (t % 64)) & 1]

    @staticmethod
    def _words(tpcs):
        w = (ctypes.c_uint64 * 2)()
        for t in tpcs:
            w[t // 64] |= 1 << (t % 64)
        return w

    def set_process(self, tpcs):
        if tpcs is None:
            return self.lib.lithos_set_process_tpcs(None)
        return self.lib.lithos_set_process_tpcs(self._words(tpcs))

    def set_stream(self, stream_handle, tpcs):
        return self.lib.lithos_stream_set_tpcs(ctypes.c_void_p(stream_handle), self._words(tpcs))

    def backend(self):
        return self.lib.lithos_backend().decode() if self.lib is not None else "absent"

    def process_tpcs(self):
        """The set `lithos run` asked for (None: whole GPU)."""
        n = os.environ.get("LITHOS_TPCS")
        if n:
            return self.live()[: int(n)]
        s = os.environ.get("LITHOS_TPC_SET")
        if s:
            out = []
            for item in s.split(","):
                if "-" in item:
                    a, b = item.split("-")
                    out.extend(range(int(a), int(b) + 1))
                else:
                    out.append(int(item))
            return out
        return None


def stats_delta(before, after):
    """Differences of the counters that matter for coverage."""
    def g(d, *path):
        for p in path:
            d = d.get(p, {}) if isinstance(d, dict) else {}
        return d if isinstance(d, int) else 0

    keys = {
        "kernel_launches": ("kernel_launches",),
        "graph_launches": ("graph_launches",),
        "masks_applied": ("masks_applied",),
        "descriptors_in_launch": ("descriptors", "in_launch"),
        "descriptors_in_graph": ("descriptors", "in_graph"),
        "descriptors_outside": ("descriptors", "outside"),
        "launches_without_descriptor": ("launches_without_descriptor",),
        "internal_errors": ("internal_errors",),
        "graph_stale": ("graph_stale",),
    }
    out = {k: g(after, *p) - g(before, *p) for k, p in keys.items()}
    out["not_applied"] = {
        k: after.get("not_applied", {}).get(k, 0) - before.get("not_applied", {}).get(k, 0)
        for k in after.get("not_applied", {})
    }
    out["calls"] = {
        k: after.get("calls", {}).get(k, 0) - before.get("calls", {}).get(k, 0) for k in after.get("calls", {})
    }
    out["calls"] = {k: v for k, v in out["calls"].items() if v}
    return out
